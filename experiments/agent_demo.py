"""Does the agent learn? Project conventions a model cannot guess, measured.

Four conventions of a made-up project ("Zorblax"), each with a checker whose failure
message names the rule, the way a linter or a reviewer would:

- ``date``: changelog dates are written ``DD.MM.YYYY``;
- ``naming``: Python functions start with ``zx_``;
- ``header``: Python files start with ``# SPDX-License-Identifier: MPL-2.0``;
- ``logging``: never ``print``; report through ``log.info`` (``from zorblax import log``).

Tasks are split per convention into training and held-out tasks. For each seed, the
experiment measures held-out success with no learned rules (the baseline; with
``learn=False`` the registry never changes, so "learning off" is this same number),
then runs the training tasks with ``learn=True`` (each failure → one diagnosis call →
one rule block), then measures held-out success again with the rules the agent
wrote, and finally with hand-written rules (the ceiling: how well the model follows
a rule it is given). ``make agent-demo`` (``python experiments/agent_demo.py``)
reruns it; ``docs/agent.md`` reports it.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from _common import experiment_backend, model_args, parse_seeds, run
from rampart.agent import Agent, Run
from rampart.errors import InvalidArgumentError
from rampart.llm import Backend
from rampart.registry import BlockRegistry

__all__ = ["CONVENTIONS", "TASKS", "Task", "run_demo"]

PERSONA = (
    "You are the coding assistant of the Zorblax project. Answer with exactly what is "
    "asked (code in one fenced block, or the requested text), without explanations."
)

#: The conventions, with the hand-written rule used for the ceiling condition.
CONVENTIONS: dict[str, str] = {
    "date": "Write every date in changelogs and release notes as DD.MM.YYYY, e.g. 05.03.2025.",
    "naming": "Start the name of every Python function with the prefix zx_, e.g. def zx_parse().",
    "header": "Begin every Python file with the line: # SPDX-License-Identifier: MPL-2.0",
    "logging": (
        "Never call print(); report messages with log.info(...) after `from zorblax import log`."
    ),
}

_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)", re.MULTILINE)


def _code(answer: str) -> str:
    """The first fenced code block of an answer, or the whole answer."""
    m = re.search(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", answer, re.DOTALL)
    return m.group(1) if m else answer


def check_date(expected: str) -> Callable[[str, Run], tuple[bool, str]]:
    """A checker passing answers that contain ``expected`` (a ``DD.MM.YYYY`` date)."""

    def check(answer: str, run: Run) -> tuple[bool, str]:
        if expected in answer:
            return True, ""
        return False, (
            f"Review: the date is not in the project's format. Changelog dates must be "
            f"written DD.MM.YYYY with dots (this one: {expected})."
        )

    return check


def check_naming(answer: str, run: Run) -> tuple[bool, str]:
    """Every Python function the answer defines starts with ``zx_``."""
    names = _DEF.findall(_code(answer))
    bad = [n for n in names if not n.startswith("zx_")]
    if names and not bad:
        return True, ""
    if not names:
        return False, "Review: no Python function was defined."
    return False, (
        f"Review: function names {', '.join(bad)} break the naming rule: every function "
        "name must start with the prefix zx_ (e.g. zx_load_config)."
    )


HEADER = "# SPDX-License-Identifier: MPL-2.0"


def check_header(answer: str, run: Run) -> tuple[bool, str]:
    """The answer's code starts with the project's SPDX licence header line."""
    lines = [ln.strip() for ln in _code(answer).strip().splitlines() if ln.strip()]
    if lines and lines[0] == HEADER:
        return True, ""
    return False, f"Review: the file's first line must be exactly `{HEADER}` (licence header)."


def check_logging(answer: str, run: Run) -> tuple[bool, str]:
    """The answer's code reports through ``log.info`` and never calls ``print``."""
    code = _code(answer)
    if "print(" not in code and "log.info(" in code:
        return True, ""
    return False, (
        "Review: the project forbids print(); output must go through log.info(...), "
        "imported with `from zorblax import log`."
    )


@dataclass(frozen=True)
class Task:
    """One task of the demo: its convention, the request text, and the checker
    returning (passed, review message)."""

    convention: str
    text: str
    check: Callable[[str, Run], tuple[bool, str]]


def _date(text: str, expected: str) -> Task:
    return Task("date", text, check_date(expected))


#: Per convention: the first half trains, the second half is held out.
TASKS: dict[str, list[Task]] = {
    "date": [
        _date(
            "Write one changelog line for the fix of the login timeout, released on 5 March 2025.",
            "05.03.2025",
        ),
        _date(
            "Write the release-notes heading for version 2.1, released on 17 January 2024.",
            "17.01.2024",
        ),
        _date(
            "Write one changelog line: the CSV export bug was fixed on 9 November 2025.",
            "09.11.2025",
        ),
        _date(
            "Write the changelog entry header for the release of 28 February 2026.",
            "28.02.2026",
        ),
        _date(
            "Write a one-line release note saying that version 3.0 shipped on 1 July 2025.",
            "01.07.2025",
        ),
        _date(
            "Write one changelog line: the cache was made faster on 22 April 2024.",
            "22.04.2024",
        ),
    ],
    "naming": [
        Task("naming", "Write a Python function that returns the average of a list.", check_naming),
        Task("naming", "Write a Python function that reverses a string.", check_naming),
        Task("naming", "Write a Python function that checks if a number is prime.", check_naming),
        Task("naming", "Write a Python function that counts the vowels in a text.", check_naming),
        Task("naming", "Write a Python function that merges two dicts.", check_naming),
        Task(
            "naming",
            "Write a Python function that returns the largest of three numbers.",
            check_naming,
        ),
    ],
    "header": [
        Task("header", "Write a Python file defining a constant MAX_USERS = 50.", check_header),
        Task("header", "Write a Python module with a Point dataclass (x, y).", check_header),
        Task("header", "Write a Python file that defines a function returning 'ok'.", check_header),
        Task("header", "Write a Python module with one Enum Color of three colours.", check_header),
        Task("header", "Write a Python file that defines DEFAULT_TIMEOUT = 30.", check_header),
        Task(
            "header", "Write a Python module with a function that doubles a number.", check_header
        ),
    ],
    "logging": [
        Task(
            "logging", "Write Python code that reports how many files were copied.", check_logging
        ),
        Task(
            "logging", "Write Python code that tells the user the upload finished.", check_logging
        ),
        Task(
            "logging",
            "Write a Python loop that shows each item of a list as it is processed.",
            check_logging,
        ),
        Task("logging", "Write Python code that reports the elapsed time of a job.", check_logging),
        Task(
            "logging",
            "Write Python code that announces that the server started on a port.",
            check_logging,
        ),
        Task(
            "logging", "Write Python code that reports the number of failed tests.", check_logging
        ),
    ],
}


def split(per_convention: int) -> tuple[list[Task], list[Task]]:
    """(training, held-out), ``per_convention`` of each, interleaved by convention so
    that a cut-short run still saw every convention."""
    most = min(len(v) for v in TASKS.values()) // 2
    if not 1 <= per_convention <= most:
        raise InvalidArgumentError(f"per_convention must be in 1..{most}, got {per_convention}")
    train, held = [], []
    for i in range(per_convention):
        for tasks in TASKS.values():
            train.append(tasks[i])
            held.append(tasks[most + i])
    return train, held


def base_registry(embedding_model: Any = None) -> BlockRegistry:
    """The demo agent's starting registry: only its persona, pinned."""
    reg = BlockRegistry(embedding_model, default_max_tokens=None)
    reg.write_block(PERSONA, "persona", source="seed", evictable=False)
    return reg


def _success(agent: Agent, tasks: Sequence[Task], seed: int) -> list[dict[str, Any]]:
    out = []
    for t in tasks:
        agent.check = t.check
        run = agent.run(t.text, seed=seed)
        out.append(
            {
                "convention": t.convention,
                "task": t.text,
                "success": bool(run.success),
                "answer": run.answer,
                "feedback": run.feedback,
                "rule": run.lesson.content if run.lesson else None,
                "rule_updated": bool(run.lesson and run.lesson.updated),
                "tokens": run.tokens,
                "seconds": round(run.latency_s, 2),
            }
        )
    return out


def _rate(rows: Sequence[dict[str, Any]]) -> float:
    return sum(r["success"] for r in rows) / len(rows) if rows else 0.0


def run_demo(
    model: Backend,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    per_convention: int = 2,
    temperature: float = 0.7,
    reply_tokens: int = 160,
    embedding_model: Any = None,
    ceiling: bool = True,
    out: Path | None = None,
    progress: TextIO | Literal["stderr"] | None = "stderr",
) -> dict[str, Any]:
    """Run the experiment; returns (and writes to ``out``/summary.json) per-seed held-out
    success before, after learning and with hand-written rules, and every run's row."""
    train, held = split(per_convention)
    if not seeds:
        raise InvalidArgumentError("run_demo needs at least one seed")
    summary: dict[str, Any] = {}
    seeds_out = []
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress is not None:
            # "stderr": sys.stderr when the message is written, not the stream that
            # was sys.stderr at import (a test's captured one is closed afterwards).
            stream = sys.stderr if progress == "stderr" else progress
            print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=stream, flush=True)

    for seed in seeds:
        reg = base_registry(embedding_model)
        kw: dict[str, Any] = {"temperature": temperature, "reply_tokens": reply_tokens}
        before = _success(Agent(reg, model, learn=False, **kw), held, seed)
        say(f"seed {seed}: held-out before {_rate(before):.0%}")
        learner = Agent(reg, model, learn=True, **kw)
        training = _success(learner, train, seed)
        rules = [b.content for b in learner.lessons()]
        say(f"seed {seed}: training {_rate(training):.0%}, {len(rules)} rules written")
        after = _success(Agent(reg, model, learn=False, **kw), held, seed)
        say(f"seed {seed}: held-out after {_rate(after):.0%}")
        row: dict[str, Any] = {
            "seed": seed,
            "before": _rate(before),
            "training": _rate(training),
            "after": _rate(after),
            "rules": rules,
            "runs": {"before": before, "training": training, "after": after},
        }
        reg.release()
        if ceiling:
            oracle = base_registry(embedding_model)
            for name, rule in CONVENTIONS.items():
                oracle.write_block(rule, f"rule_{name}", source="seed", evictable=False)
            given = _success(Agent(oracle, model, learn=False, **kw), held, seed)
            oracle.release()
            row["given_rules"] = _rate(given)
            row["runs"]["given_rules"] = given
            say(f"seed {seed}: held-out with hand-written rules {_rate(given):.0%}")
        seeds_out.append(row)
        summary = _summarise(
            seeds_out, model, per_convention, temperature, time.perf_counter() - t0
        )
        if out is not None:  # after every seed: a long run cut short keeps what it measured
            out.mkdir(parents=True, exist_ok=True)
            text = json.dumps(summary, indent=2) + "\n"
            (out / "summary.json").write_text(text, encoding="utf-8")
    return summary


def _summarise(
    rows: list[dict[str, Any]], model: Backend, per: int, temperature: float, seconds: float
) -> dict[str, Any]:
    def stats(key: str) -> dict[str, float] | None:
        vals = [r[key] for r in rows if key in r]
        if not vals:
            return None
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        return {"mean": statistics.fmean(vals), "sd": sd, "min": min(vals), "max": max(vals)}

    diffs = [r["after"] - r["before"] for r in rows]
    by_conv: dict[str, dict[str, float]] = {}
    for cond in ("before", "after", "given_rules"):
        for conv in CONVENTIONS:
            cell = [
                x["success"]
                for r in rows
                for x in r["runs"].get(cond, [])
                if x["convention"] == conv
            ]
            if cell:
                by_conv.setdefault(conv, {})[cond] = sum(cell) / len(cell)
    return {
        "model": model.describe(),
        "per_convention": per,
        "held_out_tasks": per * len(CONVENTIONS),
        "temperature": temperature,
        "seconds": round(seconds, 1),
        "before": stats("before"),
        "after": stats("after"),
        "given_rules": stats("given_rules"),
        "training": stats("training"),
        "gain": {
            "mean": statistics.fmean(diffs) if diffs else 0.0,
            "sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            "per_seed": diffs,
        },
        "by_convention": by_conv,
        "seeds": rows,
    }


def format_summary(s: dict[str, Any]) -> str:
    """The demo's result as the lines ``rampart agent demo`` prints."""
    lines = [
        f"model {s['model'].get('model')}, {s['held_out_tasks']} held-out tasks, "
        f"T={s['temperature']}, {len(s['seeds'])} seeds, {s['seconds']:.0f} s",
    ]
    for key, label in (
        ("before", "held-out, no rules (learning off)"),
        ("after", "held-out, rules the agent wrote"),
        ("given_rules", "held-out, hand-written rules"),
        ("training", "training tasks (while learning)"),
    ):
        st = s.get(key)
        if st:
            lines.append(f"  {label:40s} {st['mean']:6.1%} ± {st['sd']:.1%}")
    g = s["gain"]
    lines.append(
        f"  gain after - before: {g['mean']:+.1%} ± {g['sd']:.1%} "
        f"(per seed {', '.join(f'{d:+.0%}' for d in g['per_seed'])})"
    )
    for conv, cells in s["by_convention"].items():
        lines.append(f"  {conv:8s} " + "  ".join(f"{k} {v:.0%}" for k, v in cells.items()))
    return "\n".join(lines)


def cli_demo(
    *,
    model: str,
    base_url: str | None,
    seeds: str,
    per_convention: int,
    temperature: float,
    threads: int | None,
    out: str | None,
    ceiling: bool,
    embed: bool,
) -> int:
    """Run the experiment and print its summary."""
    seed_list = parse_seeds(seeds)
    backend = experiment_backend(model, base_url, threads, n_ctx=4096)
    embedder = None
    if embed:
        from rampart.embeddings import default_embedder

        embedder = default_embedder()
    try:
        summary = run_demo(
            backend,
            seeds=seed_list,
            per_convention=per_convention,
            temperature=temperature,
            embedding_model=embedder,
            ceiling=ceiling,
            out=Path(out) if out else None,
        )
    finally:
        backend.close()
    print(format_summary(summary))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python experiments/agent_demo.py",
        description="Tasks on conventions a model cannot guess; success on held-out tasks "
        "before learning, after learning from the training tasks, and with hand-written "
        "rules, per seed (docs/agent.md).",
    )
    model_args(p)
    p.add_argument("--seeds", default="0,1,2", help="comma list (default 0,1,2)")
    p.add_argument("--per-convention", type=int, default=2, help="train/held-out tasks each (1-3)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--out", default=None, help="folder for summary.json")
    p.add_argument("--no-ceiling", action="store_true", help="skip the hand-written-rules runs")
    p.add_argument("--no-embed", action="store_true", help="text similarity for duplicate rules")
    args = p.parse_args(argv)
    return run(
        p.prog,
        lambda: cli_demo(
            model=args.model,
            base_url=args.base_url,
            seeds=args.seeds,
            per_convention=args.per_convention,
            temperature=args.temperature,
            threads=args.threads,
            out=args.out,
            ceiling=not args.no_ceiling,
            embed=not args.no_embed,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
