"""Build tasks.json: the task-success benchmark's tasks (README.md beside this file).

The facts (a question in a user's words, its checkable answer, the line of the tool
result that answers it) are written here by hand, by a writer other than the author
of rampart's retention policy, before any model or policy ran on them. This script
does the mechanical rest: it pins every source by content (git blob id / sha256),
checks each answer is on its needle line, draws each trajectory (its length, the
needle positions, the other results) with a seed per task id, and leaves out of a
trajectory every result that holds one of the task's answers. Rerun:

    python tests/data/task_success/make_tasks.py [--out PATH]
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "tasks.json"
OUTPUTS = "tests/data/mcp_tool_outputs.json"
sys.path.insert(0, str(ROOT / "benches"))

from needle_bench import materialise  # noqa: E402

MIN_BYTES, MAX_BYTES = 500, 3072
CALLS = (6, 8)  # tool results in a transcript, drawn per task

# ---- the sources: (path, head lines or None), pinned at the commit that wrote this ----------

FILES: dict[str, int | None] = {
    # needle documents
    "seeds/README.md": None,
    "scripts/extra_requirements.py": None,
    "tests/data/skills/internal-comms/SKILL.md": None,
    "scripts/heartbeat.py": 60,
    "seeds/style.md": None,
    "seeds/safety.md": 35,
    "seeds/core_rules.md": 35,
    "tests/data/skills/brand-guidelines/SKILL.md": None,
    "tests/data/skills/theme-factory/SKILL.md": 42,
    "tests/data/skills/web-artifacts-builder/SKILL.md": 60,
    "tests/data/skills/webapp-testing/SKILL.md": 63,
    "tests/data/skills/slack-gif-creator/SKILL.md": 45,
    "tests/data/skills/mcp-builder/SKILL.md": 53,
    "seeds/tools.md": 35,
    "scripts/smoke_inside.py": None,
    # other reads (never a needle)
    "docs/index.md": None,
    "docs/api/index.md": None,
    "mkdocs.yml": None,
    ".github/workflows/ci.yml": None,
    "scripts/llama_cpp_lean.cmake": None,
    "tests/data/mcp_licenses/README.md": None,
}
GIT_LOGS = (3, 8)

# ---- family `commit`: a commit's detail ------------------------------------------------------
# Split by commit: the four smallest outputs tune, the other ten held out. Each commit
# gives three tasks: the time on its Date line asked with its result first in the
# transcript (`old`) and last (`recent`), and a file it changed (`old`).

COMMITS_TUNE = ("bbe509c7", "9cc1e42d", "7cd4677c", "f5829deb")
COMMITS_HOLDOUT = (
    "0c5e1431",
    "2105fd92",
    "7a9576c1",
    "9f985f99",
    "a43f326e",
    "a93df242",
    "b719b2b1",
    "c9109206",
    "e6f3bd75",
    "fe4538a9",
)
Q_TIME = (
    "What time of day (HH:MM:SS) is on the Date line of commit {rev}? Reply with the time only."
)
Q_FILE = "Which file did commit {rev} change? Name the file (one of them if there are several)."

# ---- family `file`: a fact in an earlier file read, asked as a paraphrase --------------------
# (id, source path, fragment of the line that answers, question, answer groups: every
# group must be in the reply, any one spelling of a group will do)

FACTS: list[tuple[str, str, str, str, list[list[str]]]] = [
    # tune
    (
        "readme-blocks",
        "seeds/README.md",
        "| **Total** | **31** |",
        "Altogether, how many instruction sections are in the example rule set for the "
        "repository assistant?",
        [["31", "thirty-one"]],
    ),
    (
        "readme-command",
        "seeds/README.md",
        "rampart compile seeds/",
        "What command line did that folder's readme give for building the whole set?",
        [["rampart compile"]],
    ),
    (
        "extras-python",
        "scripts/extra_requirements.py",
        "except ImportError:  # Python 3.10",
        "For which older interpreter release does the extras-printing helper borrow the "
        "TOML reader that ships inside pip?",
        [["3.10"]],
    ),
    (
        "extras-table",
        "scripts/extra_requirements.py",
        '"optional-dependencies"',
        "Which table of the packaging metadata does the extras-printing helper take the pins from?",
        [["optional-dependencies"]],
    ),
    (
        "comms-3p",
        "tests/data/skills/internal-comms/SKILL.md",
        "- 3P updates (Progress, Plans, Problems)",
        "In the guide for writing messages inside the company, what do the three P's of "
        "the team updates stand for?",
        [["progress"], ["plans"], ["problems"]],
    ),
    (
        "comms-general",
        "tests/data/skills/internal-comms/SKILL.md",
        "`examples/general-comms.md`",
        "Which example file should be loaded for a message that fits none of the listed kinds?",
        [["general-comms"]],
    ),
    (
        "heartbeat-every",
        "scripts/heartbeat.py",
        "[--every 30]",
        "By default, how many seconds pass between the progress lines the long-build "
        "wrapper prints?",
        [["30"]],
    ),
    (
        "heartbeat-tail",
        "scripts/heartbeat.py",
        "On failure prints the log's last 60 lines",
        "When the wrapped command fails, how many lines from the end of its log does the "
        "wrapper show?",
        [["60", "sixty"]],
    ),
    # holdout
    (
        "style-subject",
        "seeds/style.md",
        "short imperative subject line of at most 72 characters",
        "How long may the first line of a commit message be, under the house writing conventions?",
        [["72"]],
    ),
    (
        "style-naming",
        "seeds/style.md",
        "such as `retry_deadline` instead of `t2`",
        "The guidance on what to call variables contrasted a cryptic two-character name "
        "with a descriptive one. What was the descriptive one?",
        [["retry_deadline"]],
    ),
    (
        "style-test-name",
        "seeds/style.md",
        "such as `test_expired_token_is_rejected`",
        "What example function name did the testing advice give for a check that stale "
        "credentials get refused?",
        [["test_expired_token_is_rejected"]],
    ),
    (
        "safety-phone",
        "seeds/safety.md",
        "`user@example.com`, `555-0100`",
        "If I need a made-up telephone number for fixtures, which one does the "
        "personal-data guidance suggest?",
        [["555-0100"]],
    ),
    (
        "safety-destructive",
        "seeds/safety.md",
        "priority: 0.95",
        "What importance weight does the rule about commands that wipe out data carry?",
        [["0.95"]],
    ),
    (
        "safety-stash",
        "seeds/safety.md",
        "using `git stash`, when they achieve the same goal",
        "Instead of deleting things, what reversible git command does the safety "
        "guidance suggest for putting work aside?",
        [["git stash", "stash"]],
    ),
    (
        "core-tests-weight",
        "seeds/core_rules.md",
        "priority: 0.85",
        "How much weight does the operating rule about checking your work with the test "
        "suite after editing carry?",
        [["0.85"]],
    ),
    (
        "core-broken-patches",
        "seeds/core_rules.md",
        "Editing from memory or from a guess",
        "According to the operating rules, what habit is the most common source of bad patches?",
        [["memory", "guess"]],
    ),
    (
        "brand-green",
        "tests/data/skills/brand-guidelines/SKILL.md",
        "- Green: `#788c5d` - Tertiary accent",
        "What colour code goes with the third accent, the leafy one, in the brand kit?",
        [["788c5d"]],
    ),
    (
        "brand-body-font",
        "tests/data/skills/brand-guidelines/SKILL.md",
        "- **Body Text**: Lora (with Georgia fallback)",
        "Which typeface does the brand kit use for running paragraphs, and what does it "
        "fall back to?",
        [["lora"], ["georgia"]],
    ),
    (
        "theme-winter",
        "tests/data/skills/theme-factory/SKILL.md",
        "6. **Arctic Frost**",
        "Which of the preset styles would suit an icy, wintry look?",
        [["arctic frost"]],
    ),
    (
        "theme-showcase",
        "tests/data/skills/theme-factory/SKILL.md",
        "Display the `theme-showcase.pdf` file",
        "What document should be shown first so someone can look over all the styles "
        "before choosing one?",
        [["theme-showcase"]],
    ),
    (
        "artifacts-tailwind",
        "tests/data/skills/web-artifacts-builder/SKILL.md",
        "Tailwind CSS 3.4.1 with shadcn/ui theming system",
        "Which version of the utility-first CSS framework does the project set-up script install?",
        [["3.4.1"]],
    ),
    (
        "artifacts-bundle",
        "tests/data/skills/web-artifacts-builder/SKILL.md",
        "This creates `bundle.html`",
        "After everything is packed into one self-contained page, what is that file called?",
        [["bundle.html"]],
    ),
    (
        "webapp-port",
        "tests/data/skills/webapp-testing/SKILL.md",
        'python scripts/with_server.py --server "npm run dev" --port 5173',
        "In the browser-automation examples, which port does the front-end dev server listen on?",
        [["5173"]],
    ),
    (
        "webapp-helper",
        "tests/data/skills/webapp-testing/SKILL.md",
        "- `scripts/with_server.py` - Manages server lifecycle",
        "Which helper script starts and stops the app's servers around an automation run?",
        [["with_server"]],
    ),
    (
        "gif-message-size",
        "tests/data/skills/slack-gif-creator/SKILL.md",
        "- Message GIFs: 480x480",
        "For an animation posted as a regular chat message (not the tiny reactions), "
        "what pixel size is recommended?",
        [["480"]],
    ),
    (
        "gif-colours",
        "tests/data/skills/slack-gif-creator/SKILL.md",
        "builder.save('output.gif', num_colors=48",
        "In the starter code, how many palette entries is the saved animation reduced to?",
        [["48"]],
    ),
    (
        "mcp-sitemap",
        "tests/data/skills/mcp-builder/SKILL.md",
        "`https://modelcontextprotocol.io/sitemap.xml`",
        "Where does the server-building guide say to begin when looking for the "
        "protocol's documentation pages?",
        [["sitemap.xml", "sitemap"]],
    ),
    (
        "mcp-language",
        "tests/data/skills/mcp-builder/SKILL.md",
        "- **Language**: TypeScript",
        "Which programming language does the server-building guide recommend?",
        [["typescript"]],
    ),
    (
        "tools-shell-timeout",
        "seeds/tools.md",
        '`shell(command, cwd=".", timeout_s=120)`',
        "How many seconds may a command run in the assistant's terminal tool before it "
        "is stopped, by default?",
        [["120"]],
    ),
    (
        "tools-tests-timeout",
        "seeds/tools.md",
        "`run_tests(target=None, timeout_s=600)`",
        "And what is the default time limit, in seconds, of the tool that runs the "
        "project's checks?",
        [["600"]],
    ),
    (
        "smoke-marker",
        "scripts/smoke_inside.py",
        "<!-- wheel-smoke: skip REASON -->",
        "What HTML comment marks a README example that the installed-package check "
        "should not execute?",
        [["wheel-smoke"]],
    ),
    (
        "smoke-namespace",
        "scripts/smoke_inside.py",
        'namespace: dict[str, object] = {"__name__": "__readme__"}',
        "Under what module name do the README examples run in that check?",
        [["__readme__"]],
    ),
]
FACT_TUNE_SOURCES = {
    "seeds/README.md",
    "scripts/extra_requirements.py",
    "tests/data/skills/internal-comms/SKILL.md",
    "scripts/heartbeat.py",
}

# ---- family `two`: two facts from two earlier results ----------------------------------------
# Pairs of the facts above (file facts and commit details) in the same split, both
# results in the first half of the transcript; the question asks both.
Q_TWO = "Two things about what you read earlier. First: {a} Second: {b} Answer both, briefly."

TASKS_TEXT = {
    "commit": (
        "I am reviewing recent commits of the repository at /repo. Show me these commits "
        "and whatever else you need; I will ask you about them afterwards."
    ),
    "file": (
        "I'm new to this repository at /repo. Read through the files and history you "
        "think matter for getting started; I'll ask you questions afterwards."
    ),
    "two": (
        "Help me get oriented in the repository at /repo: read the rule files, the "
        "skills and the recent commits, then wait for my questions."
    ),
}


def _pinned_blob(path: str) -> str:
    """The blob tasks.json already pins for ``path`` (the data was written once: a
    later edit of the file changes nothing here, the bench reads the pinned blob from
    history), else the one at HEAD."""
    out = Path(__file__).resolve().parent / "tasks.json"
    if out.exists():
        for src in json.loads(out.read_text())["sources"].values():
            if src.get("kind") == "file" and src.get("path") == path:
                return str(src["blob"])
    return _blob_at_head(path)


def _blob_at_head(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", f"HEAD:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def sources() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path, head in FILES.items():
        args: dict[str, Any] = {"path": f"/repo/{path}"}
        sid = f"file:{path}"
        if head is not None:
            args["head"] = head
            sid += f"#head={head}"
        out[sid] = {
            "kind": "file",
            "path": path,
            "blob": _pinned_blob(path),
            "tool": "read_text_file",
            "arguments": args,
            "server": "mcp-server-filesystem",
        }
    doc = json.loads((ROOT / OUTPUTS).read_text())
    for o in doc["outputs"]:
        if not MIN_BYTES <= len(o["text"].encode()) <= MAX_BYTES:
            continue
        if o["tool"] == "git_show":
            sid = f"git_show:{o['arguments']['revision'][:8]}"
        elif o["tool"] == "git_log" and o["arguments"]["max_count"] in GIT_LOGS:
            sid = f"git_log:{o['arguments']['max_count']}"
        else:
            continue
        out[sid] = {
            "kind": "mcp_output",
            "file": OUTPUTS,
            "tool": o["tool"],
            "arguments": o["arguments"],
            "server": o["server"],
            "sha256": hashlib.sha256(o["text"].encode()).hexdigest(),
        }
    return out


def mentions(text: str, alternative: str) -> bool:
    """Whether ``alternative`` is in ``text`` as a whole token, case-insensitively
    (the judge's rule: "72" is not in "1722", "0.95" is not in "10.95", "480" is in
    "480x480", "Lora" is not in "Loraine")."""
    a = alternative
    left = r"(?<![0-9.])" if a[:1].isdigit() else r"(?<![0-9A-Za-z_])"
    right = r"(?![0-9]|\.[0-9])" if a[-1:].isdigit() else r"(?![0-9A-Za-z_])"
    return re.search(left + re.escape(a) + right, text, re.IGNORECASE) is not None


def find_line(text: str, fragment: str, where: str) -> str:
    hits = [line for line in text.split("\n") if fragment in line]
    if len(hits) != 1:
        raise SystemExit(f"{where}: {fragment!r} is on {len(hits)} lines, not one")
    return hits[0]


def _commit_facts(texts: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for split, revs in (("tune", COMMITS_TUNE), ("holdout", COMMITS_HOLDOUT)):
        for rev in revs:
            sid = f"git_show:{rev}"
            text = texts[sid]
            date = find_line(text, "Date:", sid)
            (time,) = re.findall(r"\d{2}:\d{2}:\d{2}", date)
            files = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", text, re.M)))
            short = rev[:7]
            out.append(
                {
                    "id": f"{short}-time",
                    "split": split,
                    "source": sid,
                    "lines": [date],
                    "question": Q_TIME.format(rev=short),
                    "answers": [[time]],
                    "exclusive": [time],
                }
            )
            alts = sorted({f for f in files} | {f.rsplit("/", 1)[-1] for f in files})
            out.append(
                {
                    "id": f"{short}-file",
                    "split": split,
                    "source": sid,
                    "lines": [find_line(text, f"+++ b/{f}", sid) for f in files],
                    "question": Q_FILE.format(rev=short),
                    "answers": [alts],
                    "exclusive": alts,
                }
            )
    return out


def _file_facts(srcs: dict[str, dict[str, Any]], texts: dict[str, str]) -> list[dict[str, Any]]:
    by_path = {s["path"]: sid for sid, s in srcs.items() if s["kind"] == "file"}
    out = []
    for fid, path, fragment, question, answers in FACTS:
        sid = by_path[path]
        line = find_line(texts[sid], fragment, fid)
        for group in answers:
            assert any(mentions(line, a) for a in group), (fid, group, line)
            for a in group:
                assert not mentions(question, a), (fid, a)
        out.append(
            {
                "id": fid,
                "split": "tune" if path in FACT_TUNE_SOURCES else "holdout",
                "source": sid,
                "lines": [line],
                "question": question,
                "answers": answers,
                "exclusive": [a for g in answers for a in g],
            }
        )
    return out


def _pairs(
    facts: list[dict[str, Any]],
    commits: list[dict[str, Any]],
    texts: dict[str, str],
    split: str,
    n: int,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` pairs of facts of ``split`` from two different sources, mixing the kinds:
    file + file, file + commit, commit + commit, in turn; drawn with a fixed seed."""
    rng = random.Random(f"rampart-task-success-two-{split}")
    files = [f for f in facts if f["split"] == split]
    shows = [c for c in commits if c["split"] == split]
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    seen: set[frozenset[str]] = set()
    kinds = [(files, files), (files, shows), (shows, shows)]
    while len(pairs) < n:
        a_pool, b_pool = kinds[len(pairs) % 3]
        a, b = rng.choice(a_pool), rng.choice(b_pool)
        key = frozenset((a["id"], b["id"]))
        if a["source"] == b["source"] or key in seen:
            continue
        # each answer in its own needle only, and neither question gives the other away
        clash = any(mentions(texts[b["source"]] + b["question"], x) for x in a["exclusive"])
        clash |= any(mentions(texts[a["source"]] + a["question"], x) for x in b["exclusive"])
        if clash:
            continue
        seen.add(key)
        pairs.append((a, b))
    return pairs


def main(argv: list[str]) -> int:
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
    srcs = sources()
    texts = materialise({"sources": srcs})
    for sid, t in texts.items():
        assert MIN_BYTES <= len(t.encode()) <= MAX_BYTES, (sid, len(t.encode()))
    commits = _commit_facts(texts)
    facts = _file_facts(srcs, texts)
    specs: list[tuple[str, str, str, list[dict[str, Any]]]] = []  # id, family, position, facts
    for c in commits:
        if c["id"].endswith("-time"):
            specs.append((f"{c['split']}-commit-{c['id']}-old", "commit", "old", [c]))
            specs.append((f"{c['split']}-commit-{c['id']}-recent", "commit", "recent", [c]))
        else:
            specs.append((f"{c['split']}-commit-{c['id']}-old", "commit", "old", [c]))
    for i, f in enumerate(facts):
        pos = "recent" if i % 3 == 2 else "old"
        specs.append((f"{f['split']}-file-{f['id']}-{pos}", "file", pos, [f]))
    for split, n in (("tune", 8), ("holdout", 24)):
        for a, b in _pairs(facts, commits, texts, split, n):
            specs.append((f"{split}-two-{a['id']}+{b['id']}", "two", "two", [a, b]))

    tasks = []
    for tid, family, position, mine in specs:
        split = tid.split("-")[0]
        assert all(m["split"] == split for m in mine), tid
        rng = random.Random(f"rampart-task-success-{tid}")
        n = rng.randint(*CALLS)
        needle_sources = [m["source"] for m in mine]
        exclusive = [a for m in mine for a in m["exclusive"]]
        for m in mine:  # each answer in its own needle and in no other needle
            for other in mine:
                if other is not m:
                    assert not any(mentions(texts[other["source"]], a) for a in m["exclusive"])
        pool = sorted(
            sid
            for sid, t in texts.items()
            if sid not in needle_sources and not any(mentions(t, a) for a in exclusive)
        )
        fillers = rng.sample(pool, n - len(mine))
        if position == "recent":
            positions = [n - 1]
        elif position == "old" and family == "commit":
            positions = [0]
        else:
            positions = rng.sample(range(n // 2), len(mine))
            positions.sort()
        slots: list[str | None] = [None] * n
        for p, m in zip(positions, mine, strict=True):
            slots[p] = m["source"]
        it = iter(fillers)
        trajectory = [s if s is not None else next(it) for s in slots]
        question = (
            mine[0]["question"]
            if len(mine) == 1
            else Q_TWO.format(a=mine[0]["question"], b=mine[1]["question"])
        )
        for a in exclusive:
            assert not mentions(question, a) and not mentions(TASKS_TEXT[family], a), (tid, a)
        tasks.append(
            {
                "id": tid,
                "family": family,
                "position": position,
                "split": split,
                "task": TASKS_TEXT[family],
                "trajectory": trajectory,
                "needles": [
                    {"fact": m["id"], "step": p, "source": m["source"], "lines": m["lines"]}
                    for p, m in zip(positions, mine, strict=True)
                ],
                "question": question,
                "answers": [g for m in mine for g in m["answers"]],
                "exclusive": exclusive,
            }
        )
    needle_split: dict[str, set[str]] = {"tune": set(), "holdout": set()}
    for t in tasks:
        needle_split[t["split"]].update(n["source"] for n in t["needles"])
    assert not needle_split["tune"] & needle_split["holdout"]
    used = sorted({s for t in tasks for s in t["trajectory"]})
    out = {
        "about": (
            "Task-success tasks (issue 37): agent transcripts on real tool results "
            "(read_text_file of mcp-server-filesystem; git_show/git_log of mcp-server-git, "
            "recorded in tests/data/mcp_tool_outputs.json), each ending in a question with "
            "a checkable answer, written by hand. See README.md; built by make_tasks.py."
        ),
        "servers": {
            "mcp-server-filesystem": "read_text_file(path, head?) returns the file's text as "
            "is (head=N: its first N lines); path written under /repo",
            "mcp-server-git": "2026.10.19 (tests/data/mcp_tool_outputs.json)",
        },
        "sources": {s: srcs[s] for s in used},
        "tasks": tasks,
    }
    out_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(tasks)} tasks, {len(used)} sources -> {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
