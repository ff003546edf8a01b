"""Running trials: resumable storage, bounded concurrency, retries, progress.

Prompts are built on the calling thread (registry operations are microseconds and
need no locking); only model calls go to the worker pool, at most ``concurrency``
in flight. Each finished trial is appended to ``trials.jsonl`` as one line and
flushed, so an interrupted run loses at most the calls in flight; a rerun skips
every trial that has a recorded answer and retries the ones recorded as failed.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rampart._files import atomic_write
from rampart.errors import InvalidArgumentError, RampartError
from rampart.probe.backends import Backend, BackendError, Reply
from rampart.probe.experiments import Prompt, TrialSpec, judge

TRIALS_FILE = "trials.jsonl"
CONFIG_FILE = "probe.json"


class ProbeError(RampartError):
    """A probe run cannot start or cannot go on (mismatched folder, failing backend)."""


def read_records(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The latest record of every trial key in a trials.jsonl (a retried trial's later
    record replaces its failed one), and the number of unreadable lines."""
    records: dict[str, dict[str, Any]] = {}
    torn = 0
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    records[str(rec["key"])] = rec
                except (ValueError, KeyError, TypeError, RecursionError):
                    torn += 1
    return records, torn


class TrialStore:
    """``DIR/trials.jsonl``: one JSON object per finished trial, appended under a lock.

    A torn last line (the process was killed mid-write) is ignored on load and
    overwritten by the next append's newline-terminated record.
    """

    def __init__(self, out: Path) -> None:
        self.path = out / TRIALS_FILE
        self._lock = threading.Lock()
        self.records, self.torn = read_records(self.path)
        if self.path.exists():
            self._repair_tail()

    def _repair_tail(self) -> None:
        """Make sure the file ends with a newline, so a torn line stays one bad line."""
        with open(self.path, "rb+") as f:
            if f.seek(0, 2) == 0:
                return
            f.seek(-1, 2)
            if f.read(1) != b"\n":
                f.write(b"\n")

    def done(self, key: str) -> bool:
        """Whether the trial ``key`` has a recorded result (a failed one runs again)."""
        rec = self.records.get(key)
        return rec is not None and rec.get("error") is None

    def append(self, record: dict[str, Any]) -> None:
        """Add one trial's record as one line, flushed (thread-safe; a crash loses at
        most the line being written)."""
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
            self.records[str(record["key"])] = record


def check_config(out: Path, experiment: str, config: Mapping[str, Any]) -> None:
    """Record the settings a folder's trials were run with; refuse to mix in trials
    run with other settings (positions, placements and trial counts may grow)."""
    path = out / CONFIG_FILE
    stored: dict[str, Any] = {}
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as exc:
            raise ProbeError(
                f"{path}: not valid JSON ({exc}); move it away to start over"
            ) from None
    runs = stored.setdefault("experiments", {})
    before = runs.get(experiment)
    if before is not None:
        for k in sorted(set(before) | set(config)):
            if before.get(k) != config.get(k):
                raise ProbeError(
                    f"{out}: its {experiment} trials were run with {k}={before.get(k)!r}; this "
                    f"run asks for {k}={config.get(k)!r}. Use another --out folder, or delete "
                    f"{TRIALS_FILE} and {CONFIG_FILE} there to start over"
                )
        return
    runs[experiment] = dict(config)
    stored["version"] = 1
    atomic_write(path, (json.dumps(stored, indent=2, sort_keys=True) + "\n").encode())


class Progress:
    """One line on a terminal (rewritten in place); a line per ~10 % otherwise."""

    def __init__(self, label: str, total: int, skipped: int, stream: TextIO | None) -> None:
        self.label = label
        self.total = total
        self.done = skipped
        self.ok = self.miss = self.failed = 0
        self.stream = stream
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.fresh = 0
        self._last_step = -1

    def update(self, success: bool | None) -> None:
        """Count one finished trial (``None``: the call failed) and redraw."""
        self.done += 1
        self.fresh += 1
        if success is None:
            self.failed += 1
        elif success:
            self.ok += 1
        else:
            self.miss += 1
        self.render()

    def render(self, final: bool = False) -> None:
        """Draw the progress line (``final``: the closing line, with a newline)."""
        if self.stream is None:
            return
        frac = self.done / self.total if self.total else 1.0
        step = int(frac * 10)
        if not self.tty and not final and step == self._last_step:
            return
        self._last_step = step
        elapsed = time.perf_counter() - self.t0
        rate = elapsed / self.fresh if self.fresh else 0.0
        eta = rate * (self.total - self.done)
        bar = "#" * int(frac * 24)
        line = (
            f"{self.label} {self.done}/{self.total} [{bar:<24}] hit {self.ok} miss {self.miss} "
            f"failed {self.failed}  {rate:.2f} s/trial  eta {int(eta) // 60}:{int(eta) % 60:02d}"
        )
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        if final and self.tty:
            self.stream.write("\n")
        self.stream.flush()


@dataclass
class RunStats:
    """What one call of :func:`run_trials` did."""

    planned: int
    skipped: int
    ran: int = 0
    succeeded: int = 0
    failed: int = 0
    harness_ms: list[float] = field(default_factory=list)
    model_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def _call(
    backend: Backend,
    prompt: Prompt,
    *,
    temperature: float,
    seed: int,
    max_tokens: int,
    retries: int,
    backoff: float,
) -> tuple[Reply | None, str | None, int, float]:
    """The model call with retries; returns (reply, error, attempts, seconds of the
    successful call, or of all attempts when every one failed)."""
    error: str | None = None
    t_all = time.perf_counter()
    for attempt in range(1, retries + 2):
        t0 = time.perf_counter()
        try:
            reply = backend.chat(
                prompt.messages,
                temperature=temperature,
                seed=seed,
                max_tokens=max_tokens,
                tools=prompt.tools or None,
            )
            return reply, None, attempt, time.perf_counter() - t0
        except BackendError as exc:
            error = str(exc)
            if not exc.retryable or attempt > retries:
                return None, error, attempt, time.perf_counter() - t_all
        except Exception as exc:  # a backend bug is this trial's failure, not the run's end
            return None, f"{type(exc).__name__}: {exc}", attempt, time.perf_counter() - t_all
        # Exponential backoff with jitter, so concurrent workers do not retry in step.
        time.sleep(min(backoff * 2 ** (attempt - 1), 8.0) * (0.5 + random.random()))
    return None, error, retries + 1, time.perf_counter() - t_all  # pragma: no cover


def run_trials(
    specs: Iterable[TrialSpec],
    build: Callable[[TrialSpec], Prompt],
    backend: Backend,
    store: TrialStore,
    *,
    temperature: float,
    seed: int,
    max_tokens: int,
    concurrency: int | None = None,
    retries: int = 3,
    backoff: float = 0.5,
    max_consecutive_failures: int = 10,
    progress: TextIO | None = sys.stderr,
    label: str = "",
    extra: Mapping[str, Any] | None = None,
) -> RunStats:
    """Run every planned trial that ``store`` has no answer for yet.

    Failed calls are retried ``retries`` times (retryable errors only) and then
    recorded with ``success: null`` and the error; ``max_consecutive_failures``
    failures in a row stop the run with :class:`ProbeError` (a dead server should not
    be hammered for every remaining trial). Ctrl-C stops it too; either way every
    finished trial is already on disk and a rerun resumes.
    """
    if retries < 0:
        raise InvalidArgumentError(f"retries must be >= 0, got {retries}")
    workers = min(concurrency or backend.max_concurrency, backend.max_concurrency)
    if workers < 1:
        raise InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
    plan = list(specs)
    todo = [s for s in plan if not store.done(s.key)]
    stats = RunStats(planned=len(plan), skipped=len(plan) - len(todo))
    bar = Progress(label or "trials", len(plan), stats.skipped, progress)
    bar.render()
    model = backend.model
    consecutive = 0
    aborted: str | None = None
    t_start = time.perf_counter()

    def finish(spec: TrialSpec, prompt: Prompt, build_s: float, fut: Future[Any]) -> None:
        nonlocal consecutive, aborted
        t0 = time.perf_counter()
        reply, error, attempts, model_s = fut.result()
        success = None if reply is None else judge(reply.text, reply.tool_calls, prompt.target)
        counted = reply.prompt_tokens if reply is not None else None
        record: dict[str, Any] = {
            "key": spec.key,
            "experiment": spec.experiment,
            "condition": spec.condition,
            "placement": spec.placement,
            "position": spec.position,
            "group": spec.group,
            "trial": spec.trial,
            "seed": seed + spec.trial,
            "success": success,
            "answer": None if reply is None else reply.text,
            "tool_calls": [] if reply is None else list(reply.tool_calls),
            "prompt_tokens": counted,
            "context_tokens": prompt.context_tokens,
            "blocks": prompt.blocks,
            "target_included": prompt.target_included,
            "target_index": prompt.target_index,
            "stable_prefix_tokens": prompt.stable_prefix_tokens,
            "latency_s": round(model_s, 6),
            "attempts": attempts,
            "error": error,
            "model": model,
            "finished_at": round(time.time(), 3),
        }
        if extra:
            record.update(extra)
        harness_s = build_s + (time.perf_counter() - t0)
        record["harness_ms"] = round(harness_s * 1e3, 4)
        store.append(record)
        stats.ran += 1
        stats.harness_ms.append(harness_s * 1e3)
        if error is None:
            stats.succeeded += 1
            stats.model_s.append(model_s)
            consecutive = 0
        else:
            stats.failed += 1
            consecutive += 1
            if consecutive >= max_consecutive_failures and aborted is None:
                aborted = error
        bar.update(success)

    pending: dict[Future[Any], tuple[TrialSpec, Prompt, float]] = {}
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rampart-probe")
    try:
        for spec in todo:
            while len(pending) >= workers:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    finish(*pending.pop(fut), fut)
            if aborted is not None:
                break
            t0 = time.perf_counter()
            prompt = build(spec)
            build_s = time.perf_counter() - t0
            fut = pool.submit(
                _call,
                backend,
                prompt,
                temperature=temperature,
                seed=seed + spec.trial,
                max_tokens=max_tokens,
                retries=retries,
                backoff=backoff,
            )
            pending[fut] = (spec, prompt, build_s)
        for fut in list(pending):
            fut.result()
            finish(*pending.pop(fut), fut)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.render(final=True)
        if progress is not None:
            progress.write(
                f"interrupted: {stats.skipped + stats.ran} of {stats.planned} trials are in "
                f"{store.path}; rerun the same command to resume\n"
            )
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    stats.wall_s = time.perf_counter() - t_start
    bar.render(final=True)
    if aborted is not None:
        raise ProbeError(
            f"stopped after {max_consecutive_failures} failed trials in a row; last error: "
            f"{aborted}. Finished trials are in {store.path}; rerun to resume"
        )
    return stats
