"""Real threads on one registry (docs/specification.md §5): compiles alongside writes, promotes,
evictions and snapshots, with no torn state, no deadlock and no "Already borrowed".

Every worker starts on a ``threading.Barrier`` and the interpreter switches threads
every microsecond (``sys.setswitchinterval(1e-6)``, restored afterwards). Registries
above 2048 blocks make the Rust core release the GIL for its O(n) work, so those
scenarios run Rust code truly in parallel with Python threads.

Each worker catches everything it raises; the test then asserts that the only
exceptions are the ``BlockNotFoundError`` a racing eviction (or restore) can cause.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import rampart
from rampart import BlockNotFoundError

JOIN_TIMEOUT = 60.0
SEPARATORS = [None, "", " ", " | ", "\n\n", " sep sep "]


def word_tokens(text: str) -> int:
    return len(text.split())


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@dataclass
class Outcome:
    """What the workers saw; lists are appended to from many threads (atomic in CPython)."""

    errors: list[BaseException] = field(default_factory=list)
    not_found: list[BlockNotFoundError] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    compiles: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_compile(self) -> None:
        with self.lock:
            self.compiles += 1


def run_threads(workers: list[Callable[[], None]], outcome: Outcome) -> None:
    """Start every worker behind one barrier; join with a timeout; no thread may hang."""
    barrier = threading.Barrier(len(workers), timeout=JOIN_TIMEOUT)

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                barrier.wait()
                fn()
            except BaseException as exc:  # recorded, then asserted on by the test
                outcome.errors.append(exc)

        return body

    threads = [threading.Thread(target=wrap(w), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads did not finish (deadlock?): {hung}"
    assert not outcome.errors, f"unexpected exceptions: {outcome.errors[:5]!r}"


def tolerate_not_found(outcome: Outcome, fn: Callable[[], object]) -> object:
    try:
        return fn()
    except BlockNotFoundError as exc:
        outcome.not_found.append(exc)
        return None


def separator_tokens(reg: rampart.BlockRegistry, separator: str | None) -> int:
    return reg.count_tokens(rampart.DEFAULT_SEPARATOR if separator is None else separator)


def check_compile(
    reg: rampart.BlockRegistry,
    res: rampart.CompileResult,
    separator: str | None,
    budget: int | None,
) -> None:
    """A compile is self-consistent however the registry changed around it."""
    sep = rampart.DEFAULT_SEPARATOR if separator is None else separator
    blocks = res.included_blocks
    assert res.prompt == sep.join(b.wrap_prefix + b.content + b.wrap_suffix for b in blocks)
    costs = res.costs
    assert len(costs) == len(blocks) == len(res) == len(res.included)
    assert res.total_tokens == sum(costs)
    sep_tokens = separator_tokens(reg, separator)
    assert costs == [b.cost + (sep_tokens if k else 0) for k, b in enumerate(blocks)]
    assert res.included == [b.semantic_name for b in blocks]
    assert res.included_ids == [b.runtime_id for b in blocks]
    assert len(set(res.included_ids)) == len(blocks)
    if budget is not None:
        assert res.total_tokens <= budget
    report = res.report
    assert [r.runtime_id for r in report if r.included] == res.included_ids
    assert len(report) == len(res.included) + len(res.excluded)


def check_dry_run(
    reg: rampart.BlockRegistry,
    res: rampart.DryRunResult,
    separator: str | None,
    budget: int | None,
) -> None:
    total = sum(cost for _, cost in res.included)
    assert res.total_tokens == total
    if budget is not None:
        assert total <= budget
    assert len(res.report) == len(res.included) + len(res.excluded)


def check_consistent(reg: rampart.BlockRegistry) -> list[str]:
    ids = reg.runtime_ids()
    assert len(reg) == len(ids)
    assert len(set(ids)) == len(ids), "duplicate runtime ids"
    blocks = reg.list_blocks()
    assert [b.runtime_id for b in blocks] == ids
    for k, rid in enumerate(ids):
        assert rid in reg
        assert reg.get_by_id(rid).runtime_id == rid
    # position lookups agree with the order (spot checks keep big registries fast)
    for k in {0, len(ids) // 2, len(ids) - 1} if ids else ():
        assert reg.index_of(ids[k]) == k
    # a compile after the storm sees exactly the registry
    res = reg.compile(None, separator=" | ")
    check_compile(reg, res, " | ", None)
    assert res.included_ids == ids
    return ids


def make_registry(n: int, *, tokeniser=word_tokens, seed: int = 0) -> rampart.BlockRegistry:
    rng = random.Random(seed)
    reg = rampart.BlockRegistry(tokeniser=tokeniser, default_max_tokens=None)
    words = ["alpha", "beta", "gamma", "delta", "run", "tests"]
    for i in range(n):
        content = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        if i % 10 == 0:
            reg.write_block(content, f"seed{i}", source="seed", evictable=False)
        else:
            reg.write_block(
                content,
                f"b{i}",
                priority=rng.random(),
                trajectory_id=rng.choice([None, "t1", "t2"]),
            )
    return reg


# ---- worker factories ---------------------------------------------------------------------


def compiler(reg, outcome, iters, seed, *, dry=False, budgets=(None, 0, 5, 50, 500, 10**6)):
    def work() -> None:
        rng = random.Random(seed)
        for _ in range(iters):
            budget = rng.choice(budgets)
            sep = rng.choice(SEPARATORS)
            if dry:
                check_dry_run(reg, reg.compile_dry_run(budget, separator=sep), sep, budget)
            else:
                check_compile(reg, reg.compile(budget, separator=sep), sep, budget)
                outcome.count_compile()

    return work


def writer(reg, outcome, iters, seed, *, other=None):
    def work() -> None:
        rng = random.Random(seed)
        for i in range(iters):
            kind = rng.choice(["agent", "agent", "orchestrator"])
            kwargs = {}
            if rng.random() < 0.5:
                kwargs["position"] = rng.randint(-5, len(reg) + 5)
            if kind == "orchestrator" and other is not None:
                kwargs.update(evictable=False, author=other)
            rid = reg.write_block(
                f"w{seed} {i} text",
                f"w{seed}_{i}",
                source=kind,
                trajectory_id="tw" if kind == "agent" else None,
                **kwargs,
            )
            outcome.written.append(rid)
            if rng.random() < 0.3:
                tolerate_not_found(outcome, lambda rid=rid: reg.set_wrap(rid, "<c> ", " </c>"))

    return work


def evictor(reg, outcome, iters, seed):
    def work() -> None:
        rng = random.Random(seed)
        for _ in range(iters):
            ids = reg.runtime_ids()
            if not ids:
                continue
            rid = rng.choice(ids)
            try:
                reg.evict(rid)
                outcome.evicted.append(rid)
            except BlockNotFoundError as exc:
                outcome.not_found.append(exc)
            except rampart.EvictionError:
                pass  # a seed / orchestrator block: expected, nothing removed

    return work


def promoter(reg, outcome, iters, seed):
    def one(rng: random.Random, ids: list[str]) -> object:
        rid, anchor = rng.choice(ids), rng.choice(ids)
        n = len(ids)
        op = rng.randrange(7)
        if op == 0:
            return reg.promote(rid, steps=rng.randint(-n - 3, n + 3))
        if op == 1:
            return reg.promote(rid, to_position=rng.randint(-3, n + 3))
        if op == 2:
            return reg.promote(rid, before=anchor)
        if op == 3:
            return reg.promote(rid, after=anchor)
        if op == 4:
            return reg.demote(rid, rng.randint(1, 5))
        if op == 5:
            return reg.promote_group(rng.sample(ids, min(n, 3)), to_position=rng.randint(0, n))
        reg.update_priority(rid, rng.random())
        return None

    def work() -> None:
        rng = random.Random(seed)
        for _ in range(iters):
            ids = reg.runtime_ids()
            if len(ids) < 2:
                continue
            try:
                idx = one(rng, ids)
            except BlockNotFoundError as exc:  # a racing eviction or restore
                outcome.not_found.append(exc)
                continue
            assert idx is None or isinstance(idx, int)

    return work


def snapshotter(reg, outcome, iters, seed, *, restore_every=0):
    def work() -> None:
        rng = random.Random(seed)
        for i in range(iters):
            snap = reg.snapshot()
            blocks = snap.blocks()
            assert len(blocks) == len(snap)
            assert len({b.runtime_id for b in blocks}) == len(blocks)
            if restore_every and i % restore_every == restore_every - 1 and rng.random() < 0.5:
                reg.restore(snap)

    return work


# ---- scenarios ------------------------------------------------------------------------------


def test_mixed_operations_small_registry() -> None:
    reg = make_registry(60)
    other = rampart.BlockRegistry(tokeniser=word_tokens)
    n0 = len(reg)
    outcome = Outcome()
    workers = [
        compiler(reg, outcome, 150, 1),
        compiler(reg, outcome, 150, 2, dry=True),
        writer(reg, outcome, 120, 3),
        writer(reg, outcome, 120, 4, other=other),
        evictor(reg, outcome, 150, 5),
        promoter(reg, outcome, 200, 6),
        snapshotter(reg, outcome, 100, 7),
    ]
    run_threads(workers, outcome)
    ids = check_consistent(reg)
    # no restore here, so every write and eviction is accounted for
    assert len(set(outcome.evicted)) == len(outcome.evicted), "a block was evicted twice"
    assert len(ids) == n0 + len(outcome.written) - len(outcome.evicted)
    live = set(ids)
    assert not live & set(outcome.evicted)
    assert set(outcome.written) - set(outcome.evicted) <= live
    assert outcome.compiles == 150
    reg.release()
    other.release()


def test_mixed_operations_large_registry_releases_gil() -> None:
    """> 2048 blocks: compile, evict, promote_group, restore run with the GIL released.
    Uses the built-in cl100k_base tokeniser (counted in Rust)."""
    reg = make_registry(2600, tokeniser=None, seed=11)
    assert len(reg) > 2048
    other = rampart.BlockRegistry()
    outcome = Outcome()
    workers = [
        compiler(reg, outcome, 40, 21),
        compiler(reg, outcome, 40, 22, budgets=(None, 100, 2000, 10**7)),
        compiler(reg, outcome, 40, 23, dry=True),
        writer(reg, outcome, 60, 24, other=other),
        evictor(reg, outcome, 60, 25),
        promoter(reg, outcome, 60, 26),
        snapshotter(reg, outcome, 20, 27, restore_every=5),
        snapshotter(reg, outcome, 20, 28),
    ]
    run_threads(workers, outcome)
    check_consistent(reg)
    # only racing evictions / restores may produce "not found"
    assert all(isinstance(e, KeyError) for e in outcome.not_found)
    reg.release()
    other.release()


def test_access_counts_are_not_lost_under_concurrent_changes() -> None:
    """Compile stage 4 increments ``access_count`` of every emitted block. Changing
    a block's priority or wrap while compiles run must not lose those increments:
    with no budget every compile emits every block, so at the end each block's
    count is exactly the number of compiles (no torn state, docs/specification.md §5)."""
    reg = make_registry(2600, seed=3)
    ids = reg.runtime_ids()
    compiles_per_thread, n_compilers = 25, 3
    outcome = Outcome()
    done = threading.Event()

    def changer(seed: int) -> Callable[[], None]:
        def work() -> None:
            rng = random.Random(seed)
            while not done.is_set():
                rid = rng.choice(ids)
                if rng.random() < 0.5:
                    reg.update_priority(rid, rng.random())
                else:
                    reg.set_wrap(rid, rng.choice(["", "<c>"]), "")

        return work

    remaining = [n_compilers]

    def compiling(seed: int) -> Callable[[], None]:
        inner = compiler(reg, outcome, compiles_per_thread, seed, budgets=(None,))

        def work() -> None:
            try:
                inner()
            finally:
                with outcome.lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        done.set()

        return work

    workers = [compiling(100 + k) for k in range(n_compilers)] + [changer(7), changer(8)]
    run_threads(workers, outcome)
    assert outcome.compiles == compiles_per_thread * n_compilers
    counts = [reg.get_by_id(rid).access_count for rid in ids]
    lost = [(k, c) for k, c in enumerate(counts) if c != outcome.compiles]
    assert not lost, (
        f"{len(lost)} of {len(ids)} blocks lost access counts "
        f"(expected {outcome.compiles} each; first: {lost[:5]})"
    )
    reg.release()


def test_cross_registry_writes_do_not_deadlock() -> None:
    """Two registries write into each other with ``author=`` (and force-evict and
    roll back their own blocks there) from two threads at once."""
    a = rampart.BlockRegistry(tokeniser=word_tokens, label=None)
    b = rampart.BlockRegistry(tokeniser=word_tokens)
    for k in range(2100):  # a is big enough to release the GIL on evict/compile
        a.write_block(f"seed text {k}", f"s{k}", source="seed", evictable=False)
    outcome = Outcome()

    def coordinate(me: rampart.BlockRegistry, peer: rampart.BlockRegistry, seed: int):
        def work() -> None:
            rng = random.Random(seed)
            mine: list[str] = []
            for i in range(300):
                rid = peer.write_block(
                    f"from {me.label} {i}",
                    f"plan{i}",
                    source="orchestrator",
                    evictable=False,
                    position=0,
                    author=me,
                )
                mine.append(rid)
                note = peer.write_block(
                    f"note {i}", f"note{i}", source="agent", trajectory_id=f"run{seed}", author=me
                )
                assert peer.get_by_id(note).author_id == me.registry_id
                if rng.random() < 0.3:
                    # the author may force-evict its own non-evictable block
                    peer.evict(mine.pop(rng.randrange(len(mine))), force=True, by=me)
                if rng.random() < 0.2:
                    # the receiver may not
                    victim = mine[-1] if mine else None
                    if victim is not None:
                        with pytest.raises(PermissionError):
                            peer.evict(victim, force=True)
                if rng.random() < 0.1:
                    peer.rollback_trajectory(f"run{seed}", by=me)
                me.compile(50)
                me.compile_dry_run()
            peer.rollback_trajectory(f"run{seed}", by=me)
            for rid in mine:
                peer.evict(rid, force=True, by=me)

        return work

    run_threads([coordinate(a, b, 1), coordinate(b, a, 2)], outcome)
    check_consistent(a)
    check_consistent(b)
    assert len(b) == 0, "a cleaned up everything it wrote into b"
    assert len(a) == 2100 and all(blk.source == "seed" for blk in a.list_blocks())
    a.release()
    b.release()
