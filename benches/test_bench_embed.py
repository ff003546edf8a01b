"""pytest-benchmark suite for the ONNX embedder (all-MiniLM-L6-v2, CPU unless a GPU is
picked), each next to its baseline in the same group:

* encode one short query, the 31 seed blocks (their gate text) and 200 corpus blocks,
  with rampart's default graph (onnxruntime com.microsoft fused ops) against the
  standard-op graph it builds for other providers;
* session creation from the cache: the default weights-in-``.onnx.data`` layout
  (memory-mapped by onnxruntime) against one self-contained ``.onnx`` file;
* as a server embeds (issue 11): one new query on an idle machine and with a real
  CPU-bound process running, and 8 threads each embedding new tasks, against a
  session with onnxruntime's default options (rampart's before issue 11) and a
  1-thread session, both one ``session.run`` per call.

    python -m pytest benches/test_bench_embed.py --benchmark-only -p no:cacheprovider -q

Uses the normal model cache (``rampart model prepare``, run by ``make setup``), so
nothing is built while timing. Skipped when the embed extra or the model is missing.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _corpus
import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("tokenizers")

from rampart import embeddings as E  # noqa: E402
from rampart.errors import ModelNotFoundError  # noqa: E402
from rampart.seeds import load_sources  # noqa: E402

QUERY = "How do I fix the failing test in the parser module?"
IMPLS = ["rampart-default", "standard-ops"]


def _plan(fn: Callable[[], Any], target_s: float, max_rounds: int) -> int:
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    return max(3, min(max_rounds, int(target_s / once)))


def _run(benchmark: Any, fn: Callable[[], Any], target_s: float, max_rounds: int = 300) -> Any:
    rounds = _plan(fn, target_s, max_rounds)
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def _seed_texts() -> list[str]:
    """What the gate embeds per seed block (``InstructionBlock.gate_text``)."""
    out = []
    for b in load_sources([_corpus.SEEDS]):
        d = b.description
        out.append(f"{d}\n\n{b.content}" if d else b.content)
    return out


@pytest.fixture(scope="module")
def embedders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    try:
        default = E.OnnxEmbedder(vector_cache=False)  # time the model, not the cache
    except ModelNotFoundError as exc:
        pytest.skip(str(exc))
    std = E.prepare_model(contrib_ops=False)
    std_dir = tmp_path_factory.mktemp("standard-ops")
    for f in (std.onnx_path, std.onnx_path.with_suffix(".onnx.data")):
        shutil.copy(f, std_dir)
    shutil.copy(default.model_dir / "tokenizer.json", std_dir)
    (std_dir / "sentence_bert_config.json").write_text('{"max_seq_length": 256}')
    standard = E.OnnxEmbedder(std_dir, providers=default.providers, vector_cache=False)
    texts = _seed_texts()
    assert len(texts) == 31
    assert np.abs(standard.encode_batch(texts) - default.encode_batch(texts)).max() < 1e-4
    yield {"rampart-default": default, "standard-ops": standard}


@pytest.mark.parametrize("impl", IMPLS)
def test_encode_one_query(benchmark: Any, embedders: dict[str, Any], impl: str) -> None:
    benchmark.group = "embed: 1 short query"
    emb = embedders[impl]
    _run(benchmark, lambda: emb.encode(QUERY), target_s=1.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_encode_seed_blocks(benchmark: Any, embedders: dict[str, Any], impl: str) -> None:
    benchmark.group = "embed: 31 seed blocks (gate text)"
    emb, texts = embedders[impl], _seed_texts()
    _run(benchmark, lambda: emb.encode_batch(texts), target_s=4.0, max_rounds=10)


@pytest.mark.parametrize("impl", IMPLS)
def test_encode_200_blocks(benchmark: Any, embedders: dict[str, Any], impl: str) -> None:
    benchmark.group = "embed: 200 corpus blocks (~67 tokens each)"
    emb = embedders[impl]
    texts = [text for _, text in _corpus.blocks(200)]
    _run(benchmark, lambda: emb.encode_batch(texts), target_s=6.0, max_rounds=5)


@pytest.mark.parametrize("layout", ["external-data", "single-file"])
def test_session_creation(
    benchmark: Any, embedders: dict[str, Any], tmp_path: Path, layout: str
) -> None:
    """A whole ``OnnxEmbedder(...)`` from an already-prepared graph: cache check,
    tokenizer load and onnxruntime session."""
    benchmark.group = "embed: embedder creation from the cache"
    default = embedders["rampart-default"]
    if layout == "external-data":
        _run(benchmark, E.OnnxEmbedder, target_s=2.0, max_rounds=20)
        return
    import onnx

    model = onnx.load(str(default.onnx_path))  # pulls the external data in
    onnx.save_model(model, str(tmp_path / "model.onnx"))
    shutil.copy(default.model_dir / "tokenizer.json", tmp_path)
    _run(benchmark, lambda: E.OnnxEmbedder(tmp_path), target_s=2.0, max_rounds=20)


# ---- embedding inside a busy server ------------------------------------------------------
#
# A server embeds a task it has never seen (a fresh string every round: nothing is
# cached), with other work on the machine and other sessions embedding at once.
# Baselines in each group, on the same graph and tokenizer, one onnxruntime run per
# call: "ort-default-session" is a session with onnxruntime's default options (what
# rampart used before issue 11: all cores, workers spinning after each run) and
# "ort-1-thread" a 1-thread session, which neither spins nor waits for a worker.

SERVER_IMPLS = ["rampart-default", "ort-default-session", "ort-1-thread"]


class RawSession:
    """One ``session.run`` per ``encode`` call, nothing else (the baselines)."""

    def __init__(self, emb: Any, threads: int | None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if threads is not None:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(emb.onnx_path), opts, providers=emb.providers)
        self.emb = emb

    def encode(self, text: str) -> Any:
        ids = np.asarray([self.emb._truncate(self.emb._tok.encode(text).ids)], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.session.run(["sentence_embedding"], feed)[0][0]


@pytest.fixture(scope="module")
def server_embedders(embedders: dict[str, Any]) -> dict[str, Any]:
    default = embedders["rampart-default"]
    return {
        "rampart-default": default,
        "ort-default-session": RawSession(default, None),
        "ort-1-thread": RawSession(default, 1),
    }


def _new_queries() -> Callable[[], str]:
    counter = iter(range(10**9))
    return lambda: f"{QUERY} (session {next(counter)})"


@pytest.fixture
def busy_core() -> Iterator[None]:
    """A real second process spinning on one core for the duration of the test."""
    import subprocess
    import sys

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)  # let it start and get scheduled
    assert spinner.poll() is None
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


@pytest.mark.parametrize("impl", SERVER_IMPLS)
def test_encode_new_query_idle(benchmark: Any, server_embedders: dict[str, Any], impl: str) -> None:
    benchmark.group = "embed-server: 1 new query, idle"
    emb, query = server_embedders[impl], _new_queries()
    _run(benchmark, lambda: emb.encode(query()), target_s=1.5)


@pytest.mark.parametrize("impl", SERVER_IMPLS)
def test_encode_new_query_one_core_busy(
    benchmark: Any, server_embedders: dict[str, Any], impl: str, busy_core: None
) -> None:
    benchmark.group = "embed-server: 1 new query, a CPU-bound process running"
    emb, query = server_embedders[impl], _new_queries()
    _run(benchmark, lambda: emb.encode(query()), target_s=1.5)


THREADS = 8
PER_THREAD = 6


@pytest.mark.parametrize("impl", SERVER_IMPLS)
def test_encode_new_tasks_8_threads(
    benchmark: Any, server_embedders: dict[str, Any], impl: str
) -> None:
    """8 server threads each embedding 6 new tasks (48 encode calls a round)."""
    import threading

    benchmark.group = f"embed-server: {THREADS} threads x {PER_THREAD} new tasks, encode() each"
    emb, query = server_embedders[impl], _new_queries()

    def one_thread() -> None:
        for _ in range(PER_THREAD):
            emb.encode(query())

    def run() -> None:
        workers = [threading.Thread(target=one_thread) for _ in range(THREADS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    _run(benchmark, run, target_s=4.0, max_rounds=30)
