"""pytest-benchmark: save and load of 100 000 blocks with 384-d embeddings
(target: <= 1 s each, no re-embedding, file within 1.2x of text + float32 vectors).

    python -m pytest benches/test_bench_persist.py --benchmark-only -p no:cacheprovider -q

Beside them, in the same group: numpy writing and reading the bare float32 matrix
(``np.save``/``np.load``) to the same folder, the floor any format with the vectors
pays for the bytes alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _corpus
import numpy as np
import pytest
import rampart

N, DIM = 100_000, 384


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Any:
    reg = _corpus.build_registry(N, default_max_tokens=None)
    m = np.random.default_rng(1).standard_normal((N, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    reg._core.attach_embeddings(reg._core.unembedded(), m.tobytes(), DIM, [False] * N)
    folder = tmp_path_factory.mktemp("persist")
    path = folder / "reg.rampart"
    reg.save(path)
    text = sum(len(b.content.encode()) + len(b.semantic_name.encode()) for b in reg)
    ratio = path.stat().st_size / (text + m.nbytes)
    assert ratio <= 1.2, ratio
    back = rampart.BlockRegistry.load(path)
    assert len(back) == N and back.embedding_info()["embedded"] == N
    return reg, m, folder


def test_save(benchmark: Any, big: Any) -> None:
    benchmark.group = "persist N=100000 dim=384"
    reg, _, folder = big
    benchmark.pedantic(lambda: reg.save(folder / "reg.rampart"), rounds=5, warmup_rounds=1)


def test_load(benchmark: Any, big: Any) -> None:
    benchmark.group = "persist N=100000 dim=384"
    _, _, folder = big
    benchmark.pedantic(
        lambda: rampart.BlockRegistry.load(folder / "reg.rampart"), rounds=5, warmup_rounds=1
    )


def test_numpy_matrix_save(benchmark: Any, big: Any) -> None:
    benchmark.group = "persist N=100000 dim=384"
    _, m, folder = big
    benchmark.pedantic(lambda: np.save(folder / "m.npy", m), rounds=5, warmup_rounds=1)


def test_numpy_matrix_load(benchmark: Any, big: Any) -> None:
    benchmark.group = "persist N=100000 dim=384"
    _, m, folder = big
    np.save(folder / "m.npy", m)
    benchmark.pedantic(lambda: np.load(Path(folder / "m.npy")), rounds=5, warmup_rounds=1)
