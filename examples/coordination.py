"""Shared-registry coordination: planner -> executor -> reviewer, with no LLM.

Three registries coordinate by writing blocks into each other
(``other.write_block(..., source="orchestrator", evictable=False, position=0,
author=self)``): one method call, zero coordination tokens. The model calls are
replaced by small deterministic functions, so the run prints the same trace every
time. What it shows:

* the receiver of an orchestrator block cannot change it or force-evict it
  (``OrchestratorMutationError``, ``PermissionError``), but the author can evict it;
* the receiver's ``rollback_trajectory`` removes only its own writes for that run;
* what each registry compiles at each step.

Run it from the repository root: ``python examples/coordination.py``.
"""

from __future__ import annotations

import re
import textwrap

import rampart
from rampart import BlockRegistry, get_by_label

RUN = "exec-1"  # the executor's trajectory (agent run) id
TASK = "Fix the failing date parser test, then update the changelog"


def flat(text: str, width: int = 60) -> str:
    """One line, runtime ids masked (they are fresh random UUIDs on every run)."""
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", text)
    text = " / ".join(line.strip() for line in text.splitlines() if line.strip())
    return text if len(text) <= width else text[: width - 3] + "..."


def show(reg: BlockRegistry, title: str) -> None:
    """Compile ``reg`` and print what went in, in order, and who wrote it."""
    result = reg.compile(max_tokens=400)
    print(f"  [{reg.label}] compile ({title}): {result.total_tokens} tokens")
    for block in result.included_blocks:
        author = get_label(block.author_id)
        print(
            f"    {block.source:<12} {block.semantic_name:<15} by {author:<9} {flat(block.content)}"
        )


def get_label(registry_id: str) -> str:
    for label in ("planner", "executor", "reviewer"):
        reg = get_by_label(label)
        if reg is not None and reg.registry_id == registry_id:
            return label
    return "?"


# ---- deterministic stand-ins for model calls ------------------------------------------------


def make_plan(task: str) -> list[str]:
    """The planner's "model": one step per clause of the task."""
    return [step.strip().capitalize() for step in task.split(", then ")]


def execute(step: str) -> str:
    """The executor's "model": a fixed outcome per step."""
    if "test" in step:
        return "Edited parse_date() to accept a trailing 'Z'; tests/test_dates.py passes."
    return "Added a 'Fixed' entry to CHANGELOG.md."


def review(summary: str) -> str | None:
    """The reviewer's "model": asks for the full suite when only one test file ran."""
    if "tests/test_dates.py passes" in summary and "full suite" not in summary:
        return "Run the full test suite, not only tests/test_dates.py, before finishing."
    return None


def try_(what: str, call: object) -> None:
    """Run ``call`` and print whether it worked or which error it raised."""
    try:
        out = call()  # type: ignore[operator]
    except (PermissionError, rampart.RampartError) as exc:
        kind = "PermissionError" if isinstance(exc, PermissionError) else type(exc).__name__
        print(f"  {what}: refused, {kind}")
        message = flat(str(exc), 1000)
        print(textwrap.indent(textwrap.fill(message, 92), "      "))
    else:
        print(f"  {what}: ok" + ("" if out is None else f" -> {flat(str(out))}"))


def main() -> None:
    planner = BlockRegistry(label="planner")
    executor = BlockRegistry(label="executor")
    reviewer = BlockRegistry(label="reviewer")
    try:
        run(planner, executor, reviewer)
    finally:
        for reg in (planner, executor, reviewer):
            reg.release()


def run(planner: BlockRegistry, executor: BlockRegistry, reviewer: BlockRegistry) -> None:
    # Each registry starts with its own standing instructions (non-evictable seeds).
    executor.write_block(
        "You are the executor. Do one plan step at a time and report what you changed.",
        "executor_role",
        source="seed",
        evictable=False,
    )
    reviewer.write_block(
        "You are the reviewer. Check the executor's report against the plan.",
        "reviewer_role",
        source="seed",
        evictable=False,
    )

    print("1. planner -> executor: the plan, as an orchestrator block at the front")
    steps = make_plan(TASK)
    plan_text = "Plan:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    plan_id = executor.write_block(
        plan_text, "plan", source="orchestrator", evictable=False, position=0, author=planner
    )
    # A hint for this run, written by the planner as an agent block (it alone may edit it).
    executor.write_block(
        "Dates in this project are ISO 8601.", "planner_hint", trajectory_id=RUN, author=planner
    )
    show(executor, "after the plan arrives")

    print("2. executor works; it cannot rewrite or force-evict the planner's blocks")
    for step in steps:
        executor.write_agent_block(f"Done: {step}. {execute(step)}", RUN, "progress")
    try_(
        "executor.update_block_content(plan)",
        lambda: executor.update_block_content(plan_id, "Plan: skip the tests"),
    )
    try_("executor.evict(plan)", lambda: executor.evict(plan_id))
    try_("executor.evict(plan, force=True)", lambda: executor.evict(plan_id, force=True))
    try_("executor.update_priority(plan, 0.9)", lambda: executor.update_priority(plan_id, 0.9))
    show(executor, "after the work")

    print("3. executor -> reviewer: the report, found by label")
    report = " ".join(b.content for b in executor.get_by_name("progress"))
    target = get_by_label("reviewer")
    assert target is reviewer
    target.write_block(
        "Executor report: " + report,
        "executor_report",
        source="orchestrator",
        evictable=False,
        position=0,
        author=executor,
    )
    show(reviewer, "with the report")

    print("4. reviewer -> executor: feedback; the executor rolls back its run")
    feedback = review(report)
    assert feedback is not None
    executor.write_block(
        feedback, "review", source="orchestrator", evictable=False, position=1, author=reviewer
    )
    removed = executor.rollback_trajectory(RUN)
    print(
        f"  executor.rollback_trajectory({RUN!r}) removed {removed} blocks "
        "(its own progress notes; the plan, the review and planner_hint stay)"
    )
    show(executor, "after the rollback")

    print("5. planner revises: as the author it force-evicts its old plan and writes a new one")
    try_("planner evicts plan", lambda: executor.evict(plan_id, force=True, by=planner).content)
    executor.write_block(
        plan_text + f"\n{len(steps) + 1}. Run the full test suite",
        "plan",
        source="orchestrator",
        evictable=False,
        position=0,
        author=planner,
    )
    removed = executor.rollback_trajectory(RUN, by=planner)
    print(f"  executor.rollback_trajectory({RUN!r}, by=planner) removed {removed} (planner_hint)")
    show(executor, "final")
    print("final executor prompt:")
    for line in executor.compile(max_tokens=400).prompt.splitlines():
        print(f"  | {line}")


if __name__ == "__main__":
    main()
