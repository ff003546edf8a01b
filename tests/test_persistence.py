"""save/load, pickling and export_markdown: everything comes back, new runtime ids,
no re-embedding, and a bad file is a clear error that creates nothing."""

from __future__ import annotations

import itertools
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rampart import (
    BlockPermissionError,
    BlockRegistry,
    InvalidArgumentError,
    RegistryFileError,
    get_by_label,
)

from tests.conftest import SEEDS
from tests.test_gate import HashingEmbedder


def picture(reg: BlockRegistry) -> list[tuple[object, ...]]:
    """Everything about each block except its runtime id and author id."""
    return [
        (
            b.semantic_name,
            b.content,
            b.priority,
            tuple(b.tags),
            b.source,
            b.evictable,
            b.trajectory_id,
            b.created_at,
            b.access_count,
            b.token_count,
            b.cost,
            b.metadata,
            b.embedded,
            b.embedding_truncated,
        )
        for b in reg.list_blocks()
    ]


_COUNTER = itertools.count()


def busy_registry(model: HashingEmbedder | None = None) -> tuple[BlockRegistry, BlockRegistry]:
    # Labels unique per call: a registry of an earlier test may still be alive.
    n = next(_COUNTER)
    reg = BlockRegistry.from_files([SEEDS], model, label=f"worker{n}")
    boss = BlockRegistry(label=f"boss{n}")
    reg.write_agent_block("Prefer small commits.", "run-1", "lesson", tags=["git"])
    reg.write_block(
        "Ship on Fridays only after review.",
        "policy",
        source="orchestrator",
        evictable=False,
        author=boss,
    )
    reg.set_wrap(reg.get_by_name("lesson")[0].runtime_id, "<critical>", "</critical>")
    reg.update_priority(reg.list_blocks()[3].runtime_id, 0.95)
    reg.promote_to_front(reg.list_blocks()[-1].runtime_id)
    for _ in range(3):
        reg.compile(max_tokens=600)
    if model is not None:
        reg.embed_pending()
    return reg, boss


def test_save_load_round_trip_with_embeddings(tmp_path: Path) -> None:
    model = HashingEmbedder()
    reg, boss = busy_registry(model)
    path = tmp_path / "worker.rampart"
    reg.save(path)
    calls = model.calls
    back = BlockRegistry.load(path, model)
    assert picture(back) == picture(reg)
    assert model.calls == calls  # vectors came from the file
    assert set(back.runtime_ids()).isdisjoint(reg.runtime_ids())
    for a, b in zip(reg.list_blocks(), back.list_blocks()):
        np.testing.assert_array_equal(reg.embedding(a.runtime_id), back.embedding(b.runtime_id))
    task = "write release notes"
    assert [b.semantic_name for b, _ in back.find_relevant(task, top_k=5)] == [
        b.semantic_name for b, _ in reg.find_relevant(task, top_k=5)
    ]
    assert back.compile(max_tokens=900).prompt == reg.compile(max_tokens=900).prompt
    # Provenance: the loaded registry wrote what "worker" wrote; "boss" keeps its blocks.
    policy = back.get_by_name("policy")[0]
    assert policy.author_id == boss.registry_id
    assert back.get_by_name("lesson")[0].author_id == back.registry_id
    with pytest.raises(BlockPermissionError, match=boss.label):
        back.evict(policy.runtime_id, force=True)
    back.evict(policy.runtime_id, force=True, by=boss)  # the author still can


def test_loaded_registry_keeps_working_and_saves_again(tmp_path: Path) -> None:
    reg, _ = busy_registry()
    reg.save(tmp_path / "a")
    back = BlockRegistry.load(tmp_path / "a")
    rid = back.write_agent_block("new lesson", "run-2")
    assert back.rollback_trajectory("run-1") == 1  # its own writes, as before the save
    back.save(tmp_path / "b")
    again = BlockRegistry.load(tmp_path / "b")
    assert [b.semantic_name for b in again] == [b.semantic_name for b in back]
    assert rid not in again


def test_bad_files_raise_and_create_nothing(tmp_path: Path) -> None:
    reg, _ = busy_registry(HashingEmbedder())
    good = tmp_path / "good"
    reg.save(good)
    data = good.read_bytes()
    cases = {
        "empty": b"",
        "not-ours": b"PK\x03\x04 a zip file",
        "truncated-header": data[:10],
        "truncated": data[: len(data) // 2],
        "one-byte-short": data[:-1],
        "trailing": data + b"\0",
        "flipped": data[:100] + bytes([data[100] ^ 0x40]) + data[101:],
        "newer": data[:8] + struct.pack("<I", 99) + data[12:],
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(RegistryFileError, match=str(p)) as err:
            BlockRegistry.load(p, label="must-stay-free")
        assert get_by_label("must-stay-free") is None, name
        if name == "newer":
            assert "newer rampart" in str(err.value)
        if name == "flipped":
            assert "checksum" in str(err.value)
    with pytest.raises(FileNotFoundError):
        BlockRegistry.load(tmp_path / "missing")
    with pytest.raises(InvalidArgumentError, match="tokeniser 'cl100k_base'"):
        BlockRegistry.load(good, tokeniser=lambda s: len(s.split()))


def test_a_crash_mid_save_leaves_the_previous_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, _ = busy_registry()
    path = tmp_path / "state"
    reg.save(path)
    before = path.read_bytes()
    reg.write_agent_block("written after the save", "run-9")

    def crash(fd: int) -> None:
        raise OSError("disk pulled out")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk pulled out"):
        reg.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # no temp file left
    assert len(BlockRegistry.load(path)) == len(reg) - 1


def test_pickle_round_trip() -> None:
    reg, _ = busy_registry(HashingEmbedder())
    back = pickle.loads(pickle.dumps(reg))
    assert isinstance(back, BlockRegistry)
    assert picture(back) == picture(reg)
    assert back.label != reg.label
    assert back.embedding_model is None  # only the shared default model travels
    q = reg.embedding(reg.list_blocks()[0].runtime_id)
    assert back.compile(task_embedding=q, top_k=1).included == [reg.list_blocks()[0].semantic_name]


def test_export_markdown_round_trips_through_the_seed_parser(tmp_path: Path) -> None:
    reg, _ = busy_registry()
    reg.write_agent_block(
        "  Keep a changelog.\n\n- one\n- two\n", "run-1", "changelog", 0.8, ["docs"]
    )
    out = tmp_path / "learned.md"
    assert reg.export_markdown(out) == 2
    back = BlockRegistry.from_files([out])
    agent = [b for b in reg if b.source == "agent"]
    assert [(b.semantic_name, b.content, b.priority, b.tags) for b in back] == [
        (b.semantic_name, b.content, b.priority, b.tags) for b in agent
    ]
    meta = back.list_blocks()[0].metadata
    assert meta["source"] == "agent" and meta["trajectory"] == "run-1"
    assert meta["author"] == reg.label and meta["created"].endswith("Z")
    assert "exact" not in meta
    text = out.read_text(encoding="utf-8")
    # A block Markdown holds as it is stays readable Markdown...
    assert "\nexact:" not in text.split("name: changelog")[0]
    # ...and one it would trim carries its content verbatim.
    assert '"  Keep a changelog.\\n\\n- one\\n- two\\n"' in text
    assert reg.export_markdown(tmp_path / "all.md", source=None) == len(reg)
    assert len(BlockRegistry.from_files([tmp_path / "all.md"])) == len(reg)


EXACT_CASES = [
    ("crlf", "one\r\ntwo\r\n"),
    ("lone_cr", "one\rtwo"),
    ("  outer spaces  ", "name with outer spaces"),
    ("\tnewline name\n", "x"),
    ("\x1cseparator-name", "Python strips U+001C; the core does not"),
    ("blank_lines", "\n\n  indented first line\nlast\n\n"),
    ("rule_then_name", "before\n---\nname: sneaky\n---\nafter"),
    ("rule_alone", "---"),
    ("rules", "a\n---\nb\n---\n"),
    ("unclosed_fence", "```python\nprint(1)"),
    ("after_the_fence", "must not be swallowed"),
    ("front_matter_lookalike", "---\nname: x\npriority: 2\n---"),
    ("empty", ""),
    ("only_spaces", "   "),
    ("bom", "\ufeffstarts with a BOM"),
    ("json_like", '"quoted"'),
    ("unicode_lines", "a\u2028b\x85c\x0cd"),
    ("plain", "Plain Markdown.\n\n- stays readable"),
]


def test_export_markdown_round_trips_every_block_byte_for_byte(tmp_path: Path) -> None:
    """What Markdown would change (line ends, outer blank space, '---' lines, an
    unclosed fence) is written verbatim under `exact`; nothing is refused."""
    reg = BlockRegistry()
    for name, content in EXACT_CASES:
        reg.write_block(content, name, "agent", 0.25, "run-x", ["t"])
    out = tmp_path / "exact.md"
    assert reg.export_markdown(out) == len(EXACT_CASES)
    back = BlockRegistry.from_files([out])
    assert [(b.semantic_name, b.content, b.priority, b.tags) for b in back] == [
        (name, content, 0.25, ("t",)) for name, content in EXACT_CASES
    ]
    text = out.read_text(encoding="utf-8")
    assert "\r" not in text  # CR escaped: an editor may rewrite line ends
    plain = text.split("name: plain")[1]
    assert "exact" not in plain and "\nPlain Markdown.\n\n- stays readable\n" in plain
    # A second export of what was read back is the same file, byte for byte.
    back.export_markdown(tmp_path / "again.md", source=None)
    assert [b.content for b in BlockRegistry.from_files([tmp_path / "again.md"])] == [
        c for _, c in EXACT_CASES
    ]


# Outer spaces and control characters too: export_markdown keeps names exactly.
names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1).filter(
    lambda s: not s.isspace()
)
contents = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=200)
tags = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz-_0123456789", min_size=1, max_size=8), max_size=3
)
block_specs = st.lists(
    st.tuples(names, contents, st.floats(0, 1), tags, st.sampled_from(["agent", "orchestrator"])),
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=block_specs)
def test_save_load_and_export_preserve_every_block(tmp_path: Path, specs: list) -> None:  # type: ignore[type-arg]
    reg = BlockRegistry(label=None)
    other = BlockRegistry()
    for name, content, priority, tg, source in specs:
        reg.write_block(
            content,
            name,
            source,
            priority,
            "run-p",
            tg,
            author=other if source == "orchestrator" else None,
        )
    path = tmp_path / "p.rampart"
    reg.save(path)
    back = BlockRegistry.load(path)
    assert picture(back) == picture(reg)
    assert [b.author_id == other.registry_id for b in back] == [
        b.author_id == other.registry_id for b in reg
    ]
    md = tmp_path / "p.md"
    reg.export_markdown(md, source=None)  # every block: nothing is refused
    parsed = BlockRegistry.from_files([md]) if reg.list_blocks() else BlockRegistry()
    assert [(b.semantic_name, b.content, b.priority, tuple(b.tags)) for b in parsed] == [
        (b.semantic_name, b.content, b.priority, tuple(b.tags)) for b in reg
    ]
    assert [b.metadata["source"] for b in parsed] == [b.source for b in reg]
    labels = {reg.registry_id: reg.label, other.registry_id: other.label}
    assert [b.metadata["author"] for b in parsed] == [labels[b.author_id] for b in reg]


def test_export_markdown_with_nothing_to_export_warns(tmp_path: Path) -> None:
    reg = BlockRegistry.from_files([SEEDS])  # seeds only: no agent blocks yet
    out = tmp_path / "learned.md"
    with pytest.warns(RuntimeWarning, match="has no agent blocks"):
        assert reg.export_markdown(out) == 0
    assert BlockRegistry.from_files([out]).list_blocks() == []  # still a valid seed file
