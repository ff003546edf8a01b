"""pytest-benchmark: the probe harness's own cost per trial (target <= 1 ms).

    python -m pytest benches/test_bench_probe.py --benchmark-only -p no:cacheprovider -q

What a trial costs besides the model call: restore the registry's pristine order
(``reorder``), move the critical block (``promote``, or ``promote_group`` with its
three neighbours), compile the N=31 registry and compose the chat messages; gated:
the same with the relevance gate over cached task and block vectors. Beside them in
the same group, a plain-Python baseline that builds the same prompt text from a
list of strings (no registry: what a hand-rolled harness would do). The recording
side (judging the answer, one JSON line appended and flushed) is timed as well.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from rampart.probe.experiments import NEEDLE_TASK, NeedleBench, TrialSpec, compose
from rampart.probe.runner import TrialStore

POSITIONS = itertools.cycle(range(31))


@pytest.fixture(scope="module")
def bench() -> NeedleBench:
    return NeedleBench(31)


@pytest.mark.benchmark(group="probe-prompt")
def test_prompt_promote(benchmark: Any, bench: NeedleBench) -> None:
    spec = lambda: TrialSpec("sweep", "after", "after", next(POSITIONS), 0, 0)  # noqa: E731
    p = benchmark(lambda: bench.prompt(spec()))
    assert p.blocks == 31


@pytest.mark.benchmark(group="probe-prompt")
def test_prompt_promote_group(benchmark: Any, bench: NeedleBench) -> None:
    spec = lambda: TrialSpec("sweep", "after+group3", "after", next(POSITIONS), 3, 0)  # noqa: E731
    p = benchmark(lambda: bench.prompt(spec()))
    assert p.blocks == 31


@pytest.mark.benchmark(group="probe-prompt")
def test_prompt_gated(benchmark: Any) -> None:
    pytest.importorskip("onnxruntime")
    gated = NeedleBench(31, embed=True)
    spec = lambda: TrialSpec("gating", "gated", "after", next(POSITIONS), 0, 0)  # noqa: E731
    gated.prompt(spec(), top_k=8)  # embeds the task once; trials reuse the cached vector
    p = benchmark(lambda: gated.prompt(spec(), top_k=8))
    assert p.blocks == 8


@pytest.mark.benchmark(group="probe-prompt")
def test_prompt_plain_python_baseline(benchmark: Any, bench: NeedleBench) -> None:
    texts = [b.content for b in bench.reg.list_blocks()]
    critical = texts[-1]
    rest = texts[:-1]

    def build() -> tuple[dict[str, str], ...]:
        order = list(rest)
        order.insert(next(POSITIONS), critical)
        user = compose("\n\n".join(order), NEEDLE_TASK, "after")
        return ({"role": "system", "content": "s"}, {"role": "user", "content": user})

    assert len(benchmark(build)) == 2


@pytest.mark.benchmark(group="probe-record")
def test_record_append(benchmark: Any, tmp_path: Path) -> None:
    store = TrialStore(tmp_path)
    keys = itertools.count()
    rec = {
        "experiment": "sweep",
        "condition": "after",
        "placement": "after",
        "position": 3,
        "group": 0,
        "trial": 0,
        "success": True,
        "answer": "Call `zorblax_refresh_v7()`.",
        "prompt_tokens": 722,
        "latency_s": 1.2,
        "error": None,
    }
    benchmark(lambda: store.append({**rec, "key": f"k{next(keys)}"}))
