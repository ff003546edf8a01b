"""Judging a run and diagnosing a failure: the checker's verdict (or, without one,
an LLM judge's PASS/FAIL), then one diagnosis call whose rule is learned.

Generators in the loop's protocol (:data:`rampart.agent.records.Action`): they
yield the model calls and the learning step, and the agent's driver (``run`` or
``arun``) performs them; the agent is read as a :class:`JudgeHost`."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from rampart.agent import lessons
from rampart.agent.records import Action, CheckFn, Lesson, Run, add_usage
from rampart.agent.text import clean_rule, clip

_JUDGE_SYSTEM = (
    "You grade an assistant's answer to a task. Reply with PASS or FAIL on the first "
    "line, then one sentence saying why."
)
_DIAGNOSE_SYSTEM = (
    "You review a failed attempt at a task and write one rule that would make future "
    "attempts at similar tasks pass. The rule must be specific and actionable: say "
    "exactly what to do (names, formats, values), not that one should be careful."
)


class JudgeHost(lessons.LessonHost, Protocol):
    """What judging reads of an agent, besides what learning reads."""

    check: CheckFn | None
    learn: bool


def assess(host: JudgeHost, run: Run) -> Generator[Action, Any, None]:
    """Set ``run.success`` and ``run.feedback`` (the checker, else the judge when
    the agent learns), then diagnose a failure."""
    if host.check is not None:
        verdict = host.check(run.answer, run)
        if isinstance(verdict, tuple):
            run.success, run.feedback = bool(verdict[0]), str(verdict[1])
        else:
            run.success = bool(verdict)
    elif host.learn:
        prompt = f"Task:\n{run.task}\n\nAnswer:\n{clip(run.answer, 4000)}"
        reply = yield (
            "chat",
            [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": prompt}],
            [],
            64,
        )
        add_usage(run, reply)
        head = reply.text.strip().upper()
        run.success = head.startswith("PASS")
        run.feedback = reply.text.strip()
    if host.learn and run.success is False:
        yield from diagnose(host, run)


def diagnose(host: JudgeHost, run: Run) -> Generator[Action, Any, None]:
    """Ask the model for the one rule that would have made ``run`` pass, and learn
    it (``run.lesson`` when it was compiled, not quarantined)."""
    used = [r for s in run.steps for r in s.results]
    calls = "".join(f"\n- {r.call.name}({r.call.arguments:.200}) -> {r.output[:200]}" for r in used)
    prompt = (
        f"Task:\n{run.task}\n\nAnswer given:\n{clip(run.answer, 2000)}\n\n"
        + (f"Tool calls:{calls}\n\n" if calls else "")
        + f"Why it failed:\n{run.feedback or 'it was judged a failure'}\n\n"
        f"Write the one rule, as a single imperative sentence under "
        f"{host.max_rule_chars} characters. Reply with the rule only."
    )
    reply = yield (
        "chat",
        [{"role": "system", "content": _DIAGNOSE_SYSTEM}, {"role": "user", "content": prompt}],
        [],
        max(16, host.max_rule_chars // 3),
    )
    add_usage(run, reply)
    rule = clean_rule(reply.text, host.max_rule_chars)
    if rule:
        kept = yield (
            "step",
            lessons.learn,
            (host, rule, run, "diagnosis", clip(reply.text, 2000), run.tainted),
        )
        if isinstance(kept, Lesson):
            run.lesson = kept
