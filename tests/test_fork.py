"""Fork safety (issue 11): a process that gated a large registry, or ran the embedder,
forks; the child (an ``os.fork()`` child, a ``multiprocessing`` worker with the fork
start method, a pre-fork server's worker) must gate and embed like its parent.

A thread pool started in the parent does not exist in the child, so work handed to
it waits forever: every test here runs the child under a deadline and kills it, so a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from rampart import BlockRegistry

from tests.conftest import SEEDS

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

# Far above what a healthy child needs (well under a second), so a slow CI machine
# never fails by accident; a deadlocked child is killed at this deadline.
DEADLINE_S = 30.0
# Above the row count from which the scan may use helper threads (rust/src/embeddings.rs).
ROWS = 20_000
DIM = 32


def _fork(child: Callable[[], None]) -> int:
    """Fork; in the child run ``child`` and exit 0 (or 1 with the error on stderr)."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process (onnxruntime's
        # workers) may deadlock: exactly what these tests check does not happen.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            child()
            code = 0
        except BaseException as exc:
            print(f"child failed: {exc!r}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, what: str) -> None:
    """Wait for the child; kill it and fail at the deadline."""
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, f"{what}: child failed ({status})"
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"{what}: the forked child did not finish in {DEADLINE_S:.0f} s (deadlock)")


def _large_registry() -> tuple[BlockRegistry, np.ndarray]:
    rng = np.random.default_rng(7)
    m = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    reg = BlockRegistry(default_max_tokens=None)
    for i, row in enumerate(m):
        reg.write_block(f"text {i}", f"b{i}", embedding=row)
    return reg, m


@pytest.fixture(scope="module")
def large() -> Iterator[tuple[BlockRegistry, np.ndarray]]:
    reg, m = _large_registry()
    yield reg, m
    reg.release()


def _top(reg: BlockRegistry, q: np.ndarray) -> list[str]:
    return list(reg.compile(task_embedding=q, top_k=10).included)


@pytest.mark.parametrize("quantised", [False, True], ids=["float32", "int8"])
def test_gated_compile_in_a_forked_child(
    large: tuple[BlockRegistry, np.ndarray], quantised: bool
) -> None:
    reg, m = large
    reg.quantise_embeddings(quantised)
    q = m[ROWS // 3]
    expect = _top(reg, q)
    for _ in range(3):  # the parent's scans: any pool would be running now
        assert _top(reg, q) == expect

    def child() -> None:
        for _ in range(3):
            assert _top(reg, q) == expect
        # the child's own writes and gates work too
        reg.write_block("child text", "child-block", embedding=q)
        assert "child-block" in _top(reg, q)

    _wait(_fork(child), "gated compile after fork")
    assert _top(reg, q) == expect  # the parent is unaffected


def _worker_top(i: int) -> list[str]:
    reg, m = _SHARED["reg"], _SHARED["m"]
    return _top(reg, m[i])


_SHARED: dict[str, object] = {}


def test_multiprocessing_fork_workers(large: tuple[BlockRegistry, np.ndarray]) -> None:
    """Workers forked by ``multiprocessing`` (the default start method on Linux up to
    Python 3.13) inherit the registry and gate in parallel."""
    reg, m = large
    reg.quantise_embeddings(False)
    rows = [5, ROWS // 2, ROWS - 7, 1234]
    expect = [_top(reg, m[i]) for i in rows]
    _SHARED.update(reg=reg, m=m)
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = ctx.Pool(2)
    try:
        got = pool.map_async(_worker_top, rows).get(timeout=DEADLINE_S)
    except multiprocessing.TimeoutError:
        pytest.fail(f"multiprocessing workers did not finish in {DEADLINE_S:.0f} s (deadlock)")
    finally:
        pool.terminate()
        pool.join()
        _SHARED.pop("reg", None)
        _SHARED.pop("m", None)
    assert got == expect


def test_fork_while_parent_threads_gate(large: tuple[BlockRegistry, np.ndarray]) -> None:
    """Fork while other threads of the parent are in the middle of gated compiles:
    the child gets none of their threads, and must not wait for them."""
    import threading

    reg, m = large
    reg.quantise_embeddings(False)
    q = m[77]
    expect = _top(reg, q)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            _top(reg, m[11])

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.05)
        pids = []
        for _ in range(3):
            pids.append(_fork(lambda: None if _top(reg, q) == expect else sys.exit(1)))
            time.sleep(0.01)
        for pid in pids:
            _wait(pid, "gated compile in a child forked mid-scan")
    finally:
        stop.set()
        for t in threads:
            t.join()


# ---- the embedder ----------------------------------------------------------------------------

try:
    import importlib.util

    from rampart.embeddings import MODEL_PACKAGE

    HAVE_MODEL = importlib.util.find_spec(MODEL_PACKAGE) is not None
    import onnxruntime  # noqa: F401
    import tokenizers  # noqa: F401
except ImportError:
    HAVE_MODEL = False
needs_model = pytest.mark.skipif(
    not HAVE_MODEL and os.environ.get("RAMPART_REQUIRE_MODEL") != "1",
    reason="the embed extra or the model package is not installed",
)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A fresh embedder with its own cache directory (graph and vector cache)."""
    from rampart.embeddings import OnnxEmbedder

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAMPART_CACHE_DIR", str(tmp_path_factory.mktemp("fork-cache")))
        mp.delenv("RAMPART_PROVIDERS", raising=False)
        mp.delenv("RAMPART_VECTOR_CACHE", raising=False)
        emb = OnnxEmbedder()
        _SHARED["emb"] = emb
        yield emb
        _SHARED.pop("emb", None)


@needs_model
def test_embedder_in_a_forked_child(embedder: Any) -> None:
    emb = embedder
    texts = ["fix the failing parser test", "write release notes", "tidy the imports"]
    expect = emb.encode_batch(texts)  # also fills the vector cache (SQLite)
    one = emb.encode(texts[0])
    reg = BlockRegistry.from_files([SEEDS], embedding_model=emb)
    top = [b.semantic_name for b, _ in reg.find_relevant("write the release notes", top_k=3)]

    def child() -> None:
        assert np.abs(emb.encode(texts[0]) - one).max() < 1e-5
        assert np.abs(emb.encode_batch(texts) - expect).max() < 1e-5  # the cache, reopened
        assert (
            np.abs(emb.encode_batch([*texts, "a text only the child embeds"])[:3] - expect).max()
            < 1e-5
        )
        got = [b.semantic_name for b, _ in reg.find_relevant("write the release notes", top_k=3)]
        assert got == top

    _wait(_fork(child), "embedder after fork")
    assert np.abs(emb.encode(texts[0]) - one).max() < 1e-6  # the parent still works
    assert np.abs(emb.encode_batch(texts) - expect).max() < 1e-6


def _worker_encode(text: str) -> list[float]:
    emb: Any = _SHARED["emb"]
    return [float(x) for x in emb.encode(text)]


@needs_model
def test_embedder_in_multiprocessing_fork_workers(embedder: Any) -> None:
    emb = embedder
    texts = [f"task number {i}: gate the registry" for i in range(6)]
    expect = [emb.encode(t) for t in texts]
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = ctx.Pool(2)
    try:
        got = pool.map_async(_worker_encode, texts).get(timeout=DEADLINE_S)
    except multiprocessing.TimeoutError:
        pytest.fail(f"embedding workers did not finish in {DEADLINE_S:.0f} s (deadlock)")
    finally:
        pool.terminate()
        pool.join()
    for g, e in zip(got, expect):
        assert np.abs(np.asarray(g, np.float32) - e).max() < 1e-5
