"""Does ``find_tools`` bring back the tool the gate hid? Tool-using tasks, measured.

Each task needs one specific tool among the 40 tools of six public MCP servers
(filesystem, git, memory, sqlite, time, fetch; their own ``tools/list`` schemas from
``tests/data``), all loaded into one registry so the gate picks among all 40. The
tools really run, in a throw-away sandbox: a project folder that is a git repository
(real ``git``), an SQLite file (``sqlite3``), a knowledge-graph JSON file, time zones
from ``zoneinfo``, and a local HTTP page for ``fetch`` (only 127.0.0.1 is reached).
They take the MCP servers' argument names, so the model calls them through the very
schemas the servers publish. A task succeeds when a checker finds its effect (a
file written with the right text, a branch created, a row inserted) or the right
fact in the answer (a build number read from the page, a converted time).

Three conditions over the same tasks and seeds:

- ``gated+find_tools``: the gate offers the ``top_k`` tools most relevant to the task,
  and ``find_tools(query)`` beside them (the agent's default with ``top_k``);
- ``all``: every tool in every request (no gate);
- ``gated``: the gate's ``top_k`` only (``tool_search=False``).

``make agent-tools-demo`` (``python experiments/agent_tools_demo.py``) reruns
it; docs/agent.md reports it. Several tasks are
written as shell-style shorthand ("stage notes.txt", "mv draft.md final.md"), the
kind of request issue 17 saw the gate miss; they were written before the gate was
run on them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import html
import http.server
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from _common import experiment_backend, model_args, parse_seeds, run
from rampart.agent import TOOL_SEARCH, Agent, Run
from rampart.errors import InvalidArgumentError
from rampart.llm import Backend
from rampart.registry import BlockRegistry
from rampart.tools import ToolSchema, parse_tools

__all__ = [
    "CONDITIONS",
    "TASKS",
    "TOOL_FILES",
    "Sandbox",
    "StatusPage",
    "ToolTask",
    "gate_misses",
    "run_tools_demo",
    "tool_definitions",
]

#: The six MCP servers' tool lists (40 tools), as captured in tests/data.
TOOL_FILES = (
    "mcp_filesystem_tools.json",
    "mcp_git_tools.json",
    "mcp_memory_tools.json",
    "mcp_time_tools.json",
    "mcp_fetch_tools.json",
    "mcp_sqlite_tools.json",
)

#: The conditions compared, in the order they run.
CONDITIONS = ("gated+find_tools", "all", "gated")

PERSONA = (
    "You are an assistant that does tasks with tools. The project is the folder "
    "{project} (a git repository; relative paths are inside it, and it is the "
    "repo_path of every git tool). The SQLite tools work on the project's database, "
    "the memory tools on its knowledge graph. Call the tool that does the task, then "
    "answer in one short sentence with what you did or found."
)

#: The page ``fetch`` tasks read (served on 127.0.0.1 by :class:`StatusPage`).
STATUS_HTML = (
    "<html><head><title>CI status</title></head><body><h1>Nightly build</h1>"
    "<p>Build number: <b>4711</b></p><p>Result: passed in 12 minutes.</p></body></html>"
)

_GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}
_MAX_READ = 1 << 20  # bytes a file tool reads at most


class ToolError(Exception):
    """A tool call the sandbox refuses (the model reads the message as the result)."""


def tool_definitions(data_dir: str | os.PathLike[str] | None = None) -> list[ToolSchema]:
    """The 40 MCP tool schemas of :data:`TOOL_FILES`, from ``data_dir`` (default: the
    repository's tests/data beside this package)."""
    folder = Path(data_dir) if data_dir else Path(__file__).resolve().parents[1] / "tests" / "data"
    missing = [f for f in TOOL_FILES if not (folder / f).is_file()]
    if missing:
        raise InvalidArgumentError(
            f"{folder}: the tools demo needs the MCP tool lists {', '.join(missing)} "
            "(tests/data of a rampart checkout; pass --data DIR)"
        )
    out: list[ToolSchema] = []
    for f in TOOL_FILES:
        out.extend(parse_tools(folder / f))
    return out


# ---- the page fetch reads -------------------------------------------------------------


class StatusPage:
    """A one-page HTTP server on 127.0.0.1 (``with StatusPage() as page: page.url``)."""

    def __init__(self, body: str = STATUS_HTML) -> None:
        payload = body.encode("utf-8")

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path.split("?")[0] in ("/", "/status")
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                data = payload if found else b"not found"
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # quiet
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/status"

    def __enter__(self) -> StatusPage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---- the sandbox and its 40 tools ----------------------------------------------------

_CONFIG = "[server]\nhost = 0.0.0.0\nport = 8080\nworkers = 4\n"
_APP = "import os\n\nTIMEOUT = 30\nRETRIES = 3\n\n\ndef main():\n    return TIMEOUT\n"


class Sandbox:
    """A temporary project for the demo's tools: ``root/project`` (a git repository
    with a ``main`` and a ``dev`` branch, a staged and an unstaged change), the
    project's SQLite database ``root/project.db`` and knowledge graph
    ``root/memory.json``. :meth:`reset` rebuilds it all at the same path (so the
    prompt naming it stays byte-identical from task to task)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.project = self.root / "project"
        self.db = self.root / "project.db"
        self.graph_file = self.root / "memory.json"
        self.insights: list[str] = []

    # -- building --

    def git(self, *args: str, date: str | None = None) -> str:
        """Run git in the project and return its stdout; a failure raises ToolError."""
        env = {**os.environ, **_GIT_ENV}
        if date:
            env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
        proc = subprocess.run(
            ["git", *args],
            cwd=self.project,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode != 0:
            raise ToolError(f"git {args[0]} failed: {(proc.stderr or proc.stdout).strip()[:500]}")
        return proc.stdout

    def _commit(self, message: str, author: str, date: str) -> None:
        name, email = author, author.lower().replace(" ", ".") + "@example.org"
        self.git(
            "-c",
            f"user.name={name}",
            "-c",
            f"user.email={email}",
            "commit",
            "-q",
            "-m",
            message,
            date=date,
        )

    def reset(self) -> None:
        """(Re)build the sandbox from scratch."""
        if self.root.exists():
            shutil.rmtree(self.root)
        self.project.mkdir(parents=True)
        p = self.project
        (p / "README.md").write_text(
            "# Skylark\n\nInternal codename: BLUE-HERON-7.\nA small service that "
            "schedules nightly reports.\n"
        )
        (p / "config.ini").write_text(_CONFIG)
        (p / "app.py").write_text(_APP)
        (p / "CHANGELOG.md").write_text("# Changelog\n\n## 1.0\n- First release.\n")
        (p / "draft.md").write_text("Draft of the release announcement.\n")
        (p / "conf" / "deep").mkdir(parents=True)
        (p / "conf" / "deep" / "settings.yaml").write_text("log_level: info\n")
        (p / "docs").mkdir()
        (p / "docs" / "usage.md").write_text("Run `skylark --help`.\n")
        self.git("init", "-q", "-b", "main")
        self.git("add", "README.md", "config.ini", "app.py", "CHANGELOG.md", "conf", "docs")
        self._commit("Initial import", "Grace Hopper", "2026-11-02T10:00:00+00:00")
        self.git("add", "draft.md")
        self._commit("Add the release draft", "Margo Quill", "2026-11-20T16:30:00+00:00")
        self.git("branch", "dev")
        # A staged change (for git_commit / git_diff_staged) and unstaged ones.
        with open(p / "CHANGELOG.md", "a") as f:
            f.write("\n## 1.1\n- Faster report scheduling.\n")
        self.git("add", "CHANGELOG.md")
        (p / "app.py").write_text(_APP.replace("TIMEOUT = 30", "TIMEOUT = 45"))
        (p / "notes.txt").write_text("Ask Margo about the release date.\n")
        with sqlite3.connect(self.db) as con:
            con.executescript(
                "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);"
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL);"
                "CREATE TABLE invoices (id INTEGER PRIMARY KEY, order_id INTEGER, paid INTEGER);"
            )
            con.executemany(
                "INSERT INTO customers (name, city) VALUES (?, ?)",
                [("Alan Turing", "Manchester"), ("Edsger Dijkstra", "Austin")],
            )
            con.executemany(
                "INSERT INTO orders (customer_id, amount) VALUES (?, ?)",
                [(1 + i % 2, 10.0 + i) for i in range(17)],
            )
        con.close()
        self.graph_file.write_text(
            json.dumps(
                {
                    "entities": [
                        {
                            "name": "Alice",
                            "entityType": "person",
                            "observations": ["works on the billing service"],
                        }
                    ],
                    "relations": [],
                }
            )
        )
        self.insights = []

    # -- reading the state (for checkers and tests) --

    def current_branch(self) -> str:
        """The branch HEAD is on."""
        return self.git("rev-parse", "--abbrev-ref", "HEAD").strip()

    def branches(self) -> list[str]:
        """The local branches."""
        return self.git("branch", "--format=%(refname:short)").split()

    def staged(self) -> list[str]:
        """The paths staged for the next commit."""
        return self.git("diff", "--cached", "--name-only").split()

    def head_message(self) -> str:
        """The subject line of the last commit."""
        return self.git("log", "-1", "--format=%s").strip()

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` on the project database (for checkers)."""
        con = sqlite3.connect(self.db)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def graph(self) -> dict[str, Any]:
        """The knowledge graph as the memory tools keep it."""
        data: dict[str, Any] = json.loads(self.graph_file.read_text())
        return data

    # -- paths --

    def path(self, value: Any) -> Path:
        """A path argument, resolved inside the project (like the filesystem server's
        allowed directory: anything outside is refused)."""
        if not isinstance(value, str) or not value.strip():
            raise ToolError("path must be a non-empty string")
        raw = Path(value.strip())
        target = (raw if raw.is_absolute() else self.project / raw).resolve()
        if target != self.project and self.project not in target.parents:
            raise ToolError(
                f"Access denied - path outside allowed directories: {target} not in {self.project}"
            )
        return target

    def repo(self, repo_path: Any) -> None:
        """Refuse a ``repo_path`` other than the project (the only repository here)."""
        try:
            ok = self.path(repo_path) == self.project
        except ToolError:
            ok = False
        if not ok:
            raise ToolError(
                f"{repo_path!r} is not a git repository (the project is {self.project})"
            )

    def _rel(self, p: Path) -> str:
        return str(p.relative_to(self.project)) if p != self.project else "."

    # -- the tools --

    def tools(self) -> list[Callable[..., Any]]:
        """The 40 tools as Python callables with the MCP servers' names and argument
        names. Unknown extra arguments are ignored, as the servers' pydantic models do."""
        sb = self

        def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
            # The agent feeds an exception's text back as the tool's result; a refusal
            # reads as the servers' own messages, anything else names its type.
            @functools.wraps(fn)  # keeps the signature, so tool_schema(call) works too
            def call(**kwargs: Any) -> Any:
                try:
                    return fn(**kwargs)
                except ToolError as exc:
                    raise RuntimeError(str(exc)) from None
                except (
                    OSError,
                    sqlite3.Error,
                    ValueError,
                    KeyError,
                    TypeError,
                    AttributeError,
                ) as exc:
                    raise RuntimeError(f"{type(exc).__name__}: {exc}") from None

            return call

        # filesystem

        def read_text_file(
            path: str, head: int | None = None, tail: int | None = None, **_: Any
        ) -> str:
            """Read a text file of the project."""
            with open(sb.path(path), encoding="utf-8", errors="replace") as f:
                text = f.read(_MAX_READ)
            lines = text.splitlines()
            if head:
                lines = lines[: int(head)]
            elif tail:
                lines = lines[-int(tail) :]
            return "\n".join(lines) if (head or tail) else text

        def read_multiple_files(paths: list[str], **_: Any) -> str:
            """Read several files."""
            out = []
            for p in list(paths)[:20]:
                try:
                    out.append(f"{p}:\n{read_text_file(path=p)}")
                except (ToolError, OSError) as exc:
                    out.append(f"{p}: Error - {exc}")
            return "\n---\n".join(out)

        def write_file(path: str, content: str, **_: Any) -> str:
            """Write a file."""
            target = sb.path(path)
            target.write_text(str(content), encoding="utf-8")
            return f"Successfully wrote to {path}"

        def edit_file(
            path: str,
            edits: list[dict[str, str]],
            dryRun: bool = False,
            **_: Any,
        ) -> str:
            """Replace exact text in a file."""
            target = sb.path(path)
            text = original = target.read_text(encoding="utf-8")
            for e in edits if isinstance(edits, list) else [edits]:
                old, new = str(e.get("oldText", "")), str(e.get("newText", ""))
                if not old or old not in text:
                    raise ToolError(f"Could not find exact match for edit:\n{old}")
                text = text.replace(old, new, 1)
            if not dryRun:
                target.write_text(text, encoding="utf-8")
            import difflib

            diff = difflib.unified_diff(
                original.splitlines(), text.splitlines(), path, path, lineterm=""
            )
            return "\n".join(diff)

        def create_directory(path: str, **_: Any) -> str:
            """Create a directory (and its parents)."""
            sb.path(path).mkdir(parents=True, exist_ok=True)
            return f"Successfully created directory {path}"

        def list_directory(path: str, **_: Any) -> str:
            """List a directory."""
            entries = sorted(sb.path(path).iterdir())
            return "\n".join(
                f"[DIR] {e.name}" if e.is_dir() else f"[FILE] {e.name}"
                for e in entries
                if e.name != ".git"
            )

        def directory_tree(
            path: str,
            excludePatterns: list[str] | None = None,
            **_: Any,
        ) -> str:
            """A JSON tree of a directory."""
            skip = list(excludePatterns or [])

            def tree(p: Path, depth: int) -> list[dict[str, Any]]:
                out: list[dict[str, Any]] = []
                for e in sorted(p.iterdir()):
                    if e.name == ".git" or any(fnmatch.fnmatch(e.name, s) for s in skip):
                        continue
                    node: dict[str, Any] = {
                        "name": e.name,
                        "type": "directory" if e.is_dir() else "file",
                    }
                    if e.is_dir() and depth < 8:
                        node["children"] = tree(e, depth + 1)
                    out.append(node)
                return out

            return json.dumps(tree(sb.path(path), 0), indent=1)

        def move_file(source: str, destination: str, **_: Any) -> str:
            """Move or rename a file."""
            src, dst = sb.path(source), sb.path(destination)
            if dst.exists():
                raise ToolError(f"destination {destination} already exists")
            src.rename(dst)
            return f"Successfully moved {source} to {destination}"

        def search_files(
            path: str,
            pattern: str,
            excludePatterns: list[str] | None = None,
            **_: Any,
        ) -> str:
            """Find files by glob pattern (or name fragment) under a directory."""
            base, pat = sb.path(path), str(pattern)
            skip = list(excludePatterns or [])
            hits = []
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if d != ".git")
                for n in sorted(dirnames + filenames):
                    full = Path(dirpath) / n
                    rel = str(full.relative_to(base))
                    if any(fnmatch.fnmatch(rel, s) or fnmatch.fnmatch(n, s) for s in skip):
                        continue
                    # Glob on the relative path or the name, or (as older versions of
                    # the server did) a case-insensitive fragment of the name.
                    if (
                        fnmatch.fnmatch(rel, pat)
                        or fnmatch.fnmatch(n, pat)
                        or pat.lower().strip("*") in n.lower()
                    ):
                        hits.append(str(full))
            return "\n".join(hits[:200]) if hits else "No matches found"

        def get_file_info(path: str, **_: Any) -> str:
            """Size, times and type of a file."""
            p = sb.path(path)
            st = p.stat()
            return (
                f"size: {st.st_size}\nmodified: {datetime.fromtimestamp(st.st_mtime)}\n"
                f"isDirectory: {p.is_dir()}\nisFile: {p.is_file()}\n"
                f"permissions: {oct(st.st_mode)[-3:]}"
            )

        def list_allowed_directories(**_: Any) -> str:
            """The directories the filesystem tools may touch."""
            return f"Allowed directories:\n{sb.project}"

        # git

        def git_status(repo_path: str, **_: Any) -> str:
            """git status."""
            sb.repo(repo_path)
            return "Repository status:\n" + sb.git("status")

        def git_diff_unstaged(repo_path: str, context_lines: int = 3, **_: Any) -> str:
            """Unstaged changes."""
            sb.repo(repo_path)
            return "Unstaged changes:\n" + sb.git("diff", f"--unified={int(context_lines)}")

        def git_diff_staged(repo_path: str, context_lines: int = 3, **_: Any) -> str:
            """Staged changes."""
            sb.repo(repo_path)
            return "Staged changes:\n" + sb.git(
                "diff", "--cached", f"--unified={int(context_lines)}"
            )

        def git_diff(repo_path: str, target: str, context_lines: int = 3, **_: Any) -> str:
            """Changes against a branch or commit."""
            sb.repo(repo_path)
            if str(target).startswith("-"):
                raise ToolError("target must be a branch, tag or commit, not an option")
            return f"Diff with {target}:\n" + sb.git(
                "diff", f"--unified={int(context_lines)}", str(target)
            )

        def git_commit(repo_path: str, message: str, **_: Any) -> str:
            """Commit what is staged."""
            sb.repo(repo_path)
            sb.git(
                "-c",
                "user.name=Demo Agent",
                "-c",
                "user.email=agent@example.org",
                "commit",
                "-q",
                "-m",
                str(message),
            )
            return "Changes committed successfully with hash " + sb.git("rev-parse", "HEAD")[:10]

        def git_add(repo_path: str, files: list[str], **_: Any) -> str:
            """Stage files."""
            sb.repo(repo_path)
            names = [files] if isinstance(files, str) else list(files)
            for f in names:
                sb.path(f)  # inside the project
            sb.git("add", "--", *names)
            return "Files staged successfully"

        def git_reset(repo_path: str, **_: Any) -> str:
            """Unstage everything."""
            sb.repo(repo_path)
            sb.git("reset", "-q")
            return "All staged changes reset"

        def git_log(
            repo_path: str,
            max_count: int = 10,
            order: str = "date",
            dates: dict[str, Any] | None = None,
            **_: Any,
        ) -> str:
            """Commit history."""
            sb.repo(repo_path)
            args = [
                "log",
                f"--max-count={max(1, min(int(max_count), 100))}",
                "--format=Commit: %H%nAuthor: %an <%ae>%nDate: %aI%nMessage: %s%n",
            ]
            if isinstance(dates, dict) and dates.get("since"):
                args.append(f"--since={dates['since']}")
            return "Commit history:\n" + sb.git(*args)

        def git_create_branch(
            repo_path: str, branch_name: str, base_branch: str | None = None, **_: Any
        ) -> str:
            """Create a branch."""
            sb.repo(repo_path)
            if str(branch_name).startswith("-"):
                raise ToolError("invalid branch name")
            sb.git("branch", str(branch_name), *([str(base_branch)] if base_branch else []))
            return f"Created branch '{branch_name}' from '{base_branch or sb.current_branch()}'"

        def git_checkout(repo_path: str, branch_name: str, **_: Any) -> str:
            """Switch branches."""
            sb.repo(repo_path)
            if str(branch_name).startswith("-"):
                raise ToolError("invalid branch name")
            sb.git("checkout", "-q", str(branch_name))
            return f"Switched to branch '{branch_name}'"

        def git_show(repo_path: str, revision: str, **_: Any) -> str:
            """One commit and its diff."""
            sb.repo(repo_path)
            if str(revision).startswith("-"):
                raise ToolError("invalid revision")
            return sb.git(
                "show", "--format=Commit: %H%nAuthor: %an%nDate: %aI%nMessage: %s%n", str(revision)
            )

        # memory (a knowledge graph in a JSON file, as the reference server keeps)

        def _load() -> dict[str, Any]:
            return sb.graph()

        def _save(g: dict[str, Any]) -> None:
            sb.graph_file.write_text(json.dumps(g, indent=1))

        def create_entities(entities: list[dict[str, Any]], **_: Any) -> str:
            """Add entities."""
            g = _load()
            have = {e["name"] for e in g["entities"]}
            new = []
            for e in entities:
                if e.get("name") and e["name"] not in have:
                    new.append(
                        {
                            "name": str(e["name"]),
                            "entityType": str(e.get("entityType", "")),
                            "observations": [str(o) for o in e.get("observations", [])],
                        }
                    )
                    have.add(e["name"])
            g["entities"].extend(new)
            _save(g)
            return json.dumps(new)

        def create_relations(relations: list[dict[str, Any]], **_: Any) -> str:
            """Add relations."""
            g = _load()
            new = [r for r in relations if r not in g["relations"]]
            g["relations"].extend(new)
            _save(g)
            return json.dumps(new)

        def add_observations(observations: list[dict[str, Any]], **_: Any) -> str:
            """Add observations to entities."""
            g = _load()
            by = {e["name"]: e for e in g["entities"]}
            out = []
            for o in observations:
                ent = by.get(o.get("entityName"))
                if ent is None:
                    raise ToolError(f"Entity with name {o.get('entityName')} not found")
                added = [str(c) for c in o.get("contents", []) if c not in ent["observations"]]
                ent["observations"].extend(added)
                out.append({"entityName": ent["name"], "addedObservations": added})
            _save(g)
            return json.dumps(out)

        def delete_entities(entityNames: list[str], **_: Any) -> str:
            """Delete entities and their relations."""
            g = _load()
            gone = set(entityNames)
            g["entities"] = [e for e in g["entities"] if e["name"] not in gone]
            g["relations"] = [
                r for r in g["relations"] if r.get("from") not in gone and r.get("to") not in gone
            ]
            _save(g)
            return "Entities deleted successfully"

        def delete_observations(deletions: list[dict[str, Any]], **_: Any) -> str:
            """Delete observations."""
            g = _load()
            by = {e["name"]: e for e in g["entities"]}
            for d in deletions:
                ent = by.get(d.get("entityName"))
                if ent is not None:
                    drop = set(d.get("observations", []))
                    ent["observations"] = [o for o in ent["observations"] if o not in drop]
            _save(g)
            return "Observations deleted successfully"

        def delete_relations(relations: list[dict[str, Any]], **_: Any) -> str:
            """Delete relations."""
            g = _load()
            g["relations"] = [r for r in g["relations"] if r not in relations]
            _save(g)
            return "Relations deleted successfully"

        def read_graph(**_: Any) -> str:
            """The whole graph."""
            return json.dumps(_load())

        def search_nodes(query: str, **_: Any) -> str:
            """Entities matching a query."""
            q = str(query).lower()
            g = _load()
            ents = [
                e
                for e in g["entities"]
                if q in e["name"].lower()
                or q in e["entityType"].lower()
                or any(q in o.lower() for o in e["observations"])
            ]
            names = {e["name"] for e in ents}
            rels = [r for r in g["relations"] if r.get("from") in names and r.get("to") in names]
            return json.dumps({"entities": ents, "relations": rels})

        def open_nodes(names: list[str], **_: Any) -> str:
            """Entities by name."""
            want = set([names] if isinstance(names, str) else names)
            g = _load()
            ents = [e for e in g["entities"] if e["name"] in want]
            rels = [r for r in g["relations"] if r.get("from") in want and r.get("to") in want]
            return json.dumps({"entities": ents, "relations": rels})

        # time

        def _zone(name: Any) -> ZoneInfo:
            try:
                return ZoneInfo(str(name))
            except (ZoneInfoNotFoundError, ValueError):
                raise ToolError(f"Invalid timezone: {name}") from None

        def get_current_time(timezone: str, **_: Any) -> str:
            """The current time in a time zone."""
            now = datetime.now(_zone(timezone))
            return json.dumps(
                {
                    "timezone": str(timezone),
                    "datetime": now.isoformat(timespec="seconds"),
                    "day_of_week": now.strftime("%A"),
                    "is_dst": bool(now.dst()),
                }
            )

        def convert_time(source_timezone: str, time: str, target_timezone: str, **_: Any) -> str:
            """Convert a wall-clock time between time zones (today's date)."""
            m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", str(time))
            if not m:
                raise ToolError("Invalid time format. Expected HH:MM [24-hour format]")
            src, dst = _zone(source_timezone), _zone(target_timezone)
            today = datetime.now(src).date()
            at = datetime(today.year, today.month, today.day, int(m[1]), int(m[2]), tzinfo=src)
            there = at.astimezone(dst)
            hours = (there.utcoffset() or timedelta()) - (at.utcoffset() or timedelta())
            return json.dumps(
                {
                    "source": {"timezone": source_timezone, "datetime": at.isoformat()},
                    "target": {"timezone": target_timezone, "datetime": there.isoformat()},
                    "time_difference": f"{hours.total_seconds() / 3600:+.1f}h",
                }
            )

        # fetch (127.0.0.1 only: the demo reaches nothing else)

        def fetch(
            url: str, max_length: int = 5000, start_index: int = 0, raw: bool = False, **_: Any
        ) -> str:
            """Fetch a URL."""
            m = re.match(r"^https?://(127\.0\.0\.1|localhost)(:\d+)?(/|$)", str(url))
            if not m:
                raise ToolError(f"this demo reaches only http://127.0.0.1, not {url}")
            with urllib.request.urlopen(str(url), timeout=10) as resp:
                body: str = resp.read(_MAX_READ).decode("utf-8", "replace")
            if not raw:
                body = html.unescape(re.sub(r"<[^>]+>", " ", body))
                body = re.sub(r"[ \t]+", " ", body).strip()
            start = max(0, int(start_index))
            return f"Contents of {url}:\n" + body[start : start + max(1, int(max_length))]

        # sqlite

        def _sql(query: Any, write: bool) -> list[tuple[Any, ...]] | int:
            con = sqlite3.connect(sb.db)
            try:
                cur = con.execute(str(query))
                if write:
                    con.commit()
                    return cur.rowcount
                return cur.fetchmany(500)
            finally:
                con.close()

        def read_query(query: str, **_: Any) -> str:
            """A SELECT query."""
            if not str(query).strip().upper().startswith(("SELECT", "WITH")):
                raise ToolError("Only SELECT queries are allowed for read_query")
            return str(_sql(query, False))

        def write_query(query: str, **_: Any) -> str:
            """An INSERT, UPDATE or DELETE query."""
            if str(query).strip().upper().startswith("SELECT"):
                raise ToolError("SELECT queries are not allowed for write_query")
            return str([{"affected_rows": _sql(query, True)}])

        def create_table(query: str, **_: Any) -> str:
            """A CREATE TABLE statement."""
            if not str(query).strip().upper().startswith("CREATE TABLE"):
                raise ToolError("Only CREATE TABLE statements are allowed")
            _sql(query, True)
            return "Table created successfully"

        def list_tables(**_: Any) -> str:
            """The tables of the database."""
            rows = sb.query("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
            return str([{"name": r[0]} for r in rows])

        def describe_table(table_name: str, **_: Any) -> str:
            """The columns of a table."""
            if not re.fullmatch(r"\w+", str(table_name)):
                raise ToolError(f"invalid table name {table_name!r}")
            rows = sb.query(f"PRAGMA table_info({table_name})")
            if not rows:
                raise ToolError(f"Table {table_name} does not exist")
            return str([{"name": r[1], "type": r[2], "notnull": r[3], "pk": r[5]} for r in rows])

        def append_insight(insight: str, **_: Any) -> str:
            """Add a business insight to the memo."""
            sb.insights.append(str(insight))
            return "Insight added to memo"

        fns: list[Callable[..., Any]] = [
            read_text_file,
            read_multiple_files,
            write_file,
            edit_file,
            create_directory,
            list_directory,
            directory_tree,
            move_file,
            search_files,
            get_file_info,
            list_allowed_directories,
            git_status,
            git_diff_unstaged,
            git_diff_staged,
            git_diff,
            git_commit,
            git_add,
            git_reset,
            git_log,
            git_create_branch,
            git_checkout,
            git_show,
            create_entities,
            create_relations,
            add_observations,
            delete_entities,
            delete_observations,
            delete_relations,
            read_graph,
            search_nodes,
            open_nodes,
            get_current_time,
            convert_time,
            fetch,
            read_query,
            write_query,
            create_table,
            list_tables,
            describe_table,
            append_insight,
        ]
        return [guard(f) for f in fns]


# ---- tasks and their checkers ------------------------------------------------------------

Check = Callable[[Sandbox, str], tuple[bool, str]]


@dataclass(frozen=True)
class ToolTask:
    """One task: its request (``{url}`` is the status page), the tools that do it
    (first: the intended one; any of them counts as the gate finding the tool),
    whether it is written as shell-style shorthand, and its checker."""

    name: str
    text: str
    tools: tuple[str, ...]
    check: Check
    shorthand: bool = False


def _contains(*needles: str) -> Check:
    def check(sb: Sandbox, answer: str) -> tuple[bool, str]:
        low = answer.lower()
        miss = [n for n in needles if n.lower() not in low]
        return (not miss, f"the answer does not mention {', '.join(miss)}" if miss else "")

    return check


def _staged(name: str) -> Check:
    def check(sb: Sandbox, answer: str) -> tuple[bool, str]:
        ok = name in sb.staged()
        return ok, "" if ok else f"{name} is not staged"

    return check


def _file_is(rel: str, want: Callable[[str], bool], what: str) -> Check:
    def check(sb: Sandbox, answer: str) -> tuple[bool, str]:
        p = sb.project / rel
        ok = p.is_file() and want(p.read_text(encoding="utf-8", errors="replace"))
        return ok, "" if ok else f"{rel}: {what}"

    return check


def _check_branch_created(sb: Sandbox, answer: str) -> tuple[bool, str]:
    ok = "release-2.0" in sb.branches()
    return ok, "" if ok else "no branch release-2.0"


def _check_on_dev(sb: Sandbox, answer: str) -> tuple[bool, str]:
    ok = sb.current_branch() == "dev"
    return ok, "" if ok else f"HEAD is on {sb.current_branch()}, not dev"


def _check_committed(sb: Sandbox, answer: str) -> tuple[bool, str]:
    msg = sb.head_message()
    ok = msg.strip().strip("'\"").lower() == "update changelog" and not sb.staged()
    return ok, "" if ok else f"last commit is {msg!r} (staged: {sb.staged()})"


def _check_config(sb: Sandbox, answer: str) -> tuple[bool, str]:
    text = (sb.project / "config.ini").read_text()
    ok = re.search(r"^port\s*=\s*9090\s*$", text, re.M) is not None and all(
        line in text for line in ("[server]", "host = 0.0.0.0", "workers = 4")
    )
    return ok, "" if ok else "config.ini does not have port 9090 with the rest intact"


def _check_dir(sb: Sandbox, answer: str) -> tuple[bool, str]:
    ok = (sb.project / "build" / "output").is_dir()
    return ok, "" if ok else "build/output is not a directory"


def _check_moved(sb: Sandbox, answer: str) -> tuple[bool, str]:
    p = sb.project
    ok = (p / "final.md").is_file() and not (p / "draft.md").exists()
    ok = ok and (p / "final.md").read_text().startswith("Draft of the release")
    return ok, "" if ok else "draft.md was not renamed to final.md"


def _check_customer(sb: Sandbox, answer: str) -> tuple[bool, str]:
    rows = sb.query("SELECT name, city FROM customers WHERE name LIKE '%Lovelace%'")
    ok = any("ada" in (r[0] or "").lower() and (r[1] or "").lower() == "london" for r in rows)
    return ok, "" if ok else f"no customer Ada Lovelace in London (found {rows})"


def _check_bob(sb: Sandbox, answer: str) -> tuple[bool, str]:
    for e in sb.graph()["entities"]:
        if "bob" in e["name"].lower() and any("call" in o.lower() for o in e["observations"]):
            return True, ""
        if any("bob" in o.lower() and "call" in o.lower() for o in e["observations"]):
            return True, ""
    return False, "the knowledge graph does not say Bob is on call"


_CLOCK = re.compile(r"\b(\d{1,2})[:.](\d{2})\s*([AaPp]\.?[Mm]\.?)?")


def _times(answer: str) -> set[tuple[int, int]]:
    """Every wall-clock time an answer states, as (hour 0-23, minute)."""
    out = set()
    for h, m, ampm in _CLOCK.findall(answer):
        hour, minute = int(h), int(m)
        if ampm:
            pm = ampm.lower().startswith("p")
            hour = hour % 12 + (12 if pm else 0)
        if hour < 24 and minute < 60:
            out.add((hour, minute))
    return out


def _check_converted(sb: Sandbox, answer: str) -> tuple[bool, str]:
    ny, kolkata = ZoneInfo("America/New_York"), ZoneInfo("Asia/Kolkata")
    today = datetime.now(ny).date()
    at = datetime(today.year, today.month, today.day, 9, 30, tzinfo=ny).astimezone(kolkata)
    ok = (at.hour, at.minute) in _times(answer)
    return ok, "" if ok else f"the answer does not give {at:%H:%M} (Bangalore)"


def _check_tokyo_now(sb: Sandbox, answer: str) -> tuple[bool, str]:
    now = datetime.now(ZoneInfo("Asia/Tokyo"))
    # The run took a while: any minute of the last quarter hour is "now".
    recent = {
        ((now - timedelta(minutes=i)).hour, (now - timedelta(minutes=i)).minute) for i in range(16)
    }
    ok = bool(recent & _times(answer))
    return ok, "" if ok else f"the answer does not give the time in Tokyo (about {now:%H:%M})"


#: The tasks, in the order they run. Written before the gate was run on any of them.
TASKS: list[ToolTask] = [
    ToolTask("stage", "stage notes.txt", ("git_add",), _staged("notes.txt"), True),
    ToolTask(
        "cat",
        "cat README.md and tell me the internal codename",
        ("read_text_file", "read_multiple_files"),
        _contains("BLUE-HERON-7"),
        True,
    ),
    ToolTask(
        "new-branch",
        "Create a branch named release-2.0 from main.",
        ("git_create_branch",),
        _check_branch_created,
    ),
    ToolTask("switch", "switch to dev", ("git_checkout",), _check_on_dev, True),
    ToolTask(
        "commit",
        "Commit what's staged with the message 'Update changelog'.",
        ("git_commit",),
        _check_committed,
    ),
    ToolTask(
        "write",
        "Put the text 'hello world' in a new file greeting.txt.",
        ("write_file",),
        _file_is("greeting.txt", lambda t: t.strip() == "hello world", "not 'hello world'"),
    ),
    ToolTask(
        "edit",
        "In config.ini change the port from 8080 to 9090.",
        ("edit_file", "write_file"),
        _check_config,
    ),
    ToolTask("mkdir", "mkdir -p build/output", ("create_directory",), _check_dir, True),
    ToolTask("mv", "mv draft.md final.md", ("move_file",), _check_moved, True),
    ToolTask(
        "find-file",
        "where's settings.yaml? give me its path",
        ("search_files", "directory_tree"),
        _contains("conf/deep/settings.yaml"),
        True,
    ),
    ToolTask(
        "count",
        "How many orders are in the database?",
        ("read_query",),
        _contains("17"),
    ),
    ToolTask(
        "insert",
        "Add a customer called Ada Lovelace from London to the customers table.",
        ("write_query",),
        _check_customer,
    ),
    ToolTask(
        "tables",
        "Which tables does the database have?",
        ("list_tables", "read_query"),
        _contains("customers", "orders", "invoices"),
    ),
    ToolTask(
        "convert",
        "Standup is 09:30 New York time. What time is that in Bangalore?",
        ("convert_time",),
        _check_converted,
    ),
    ToolTask(
        "now",
        "What time is it in Tokyo right now?",
        ("get_current_time",),
        _check_tokyo_now,
    ),
    ToolTask(
        "remember",
        "Note in the knowledge graph that Bob is on call this week.",
        ("create_entities", "add_observations"),
        _check_bob,
    ),
    ToolTask(
        "fetch",
        "What build number does {url} report?",
        ("fetch",),
        _contains("4711"),
    ),
    ToolTask(
        "last-commit",
        "who made the last commit?",
        ("git_log", "git_show"),
        _contains("Margo Quill"),
        True,
    ),
    ToolTask(
        "diff",
        "what did I change in app.py? not staged yet",
        ("git_diff_unstaged", "git_diff", "git_status"),
        _contains("45"),
        True,
    ),
]


# ---- the experiment -----------------------------------------------------------------------


def base_registry(
    embedding_model: Any, project: Path, data_dir: str | os.PathLike[str] | None = None
) -> BlockRegistry:
    """The persona (never gated) and the 40 MCP tools (pinned, gated)."""
    reg = BlockRegistry(embedding_model, default_max_tokens=None)
    reg.write_block(
        PERSONA.format(project=project), "persona", source="seed", evictable=False, gated=False
    )
    reg.load_tools([s.to_openai() for s in tool_definitions(data_dir)], evictable=False)
    return reg


def gate_misses(
    registry: BlockRegistry, tasks: Sequence[ToolTask], top_k: int, url: str = ""
) -> dict[str, list[str]]:
    """For each task, the tools the gate offers at ``top_k`` (the agent's first
    compile); a task is missed when none of its tools is among them."""
    out = {}
    for t in tasks:
        result = registry.compile(
            None, task_text=t.text.format(url=url), top_k=top_k, tools_in_prompt=False
        )
        out[t.name] = [d["function"]["name"] for d in result.tools()]
    return out


def _agent(
    condition: str, reg: BlockRegistry, model: Backend, tools: list[Any], kw: dict[str, Any]
) -> Agent:
    top_k = kw.pop("top_k")
    if condition == "all":  # no gate, so no find_tools either
        return Agent(reg, model, tools, **kw)
    search = condition == "gated+find_tools"
    return Agent(reg, model, tools, top_k=top_k, tool_search=search, **kw)


def _row(task: ToolTask, condition: str, run: Run, gated: bool) -> dict[str, Any]:
    first = run.steps[0].tools_offered if run.steps else []
    called = [r.call.name for r in run.tool_results]
    gate_hit = any(t in first for t in task.tools)
    needed_called = [i for i, n in enumerate(called) if n in task.tools]
    searched = [i for i, n in enumerate(called) if n == TOOL_SEARCH]
    found = any(t in run.found_tools for t in task.tools)
    calls = len([s for s in run.steps])
    return {
        "task": task.name,
        "condition": condition,
        "success": bool(run.success),
        "feedback": run.feedback,
        "gate_hit": gate_hit if gated else None,
        "tools_offered": len(first),
        "called": called,
        "needed_called": bool(needed_called),
        "find_tools_calls": len(searched),
        # What the model asked find_tools for, and the names it was given back.
        "find_tools_queries": [
            r.call.arguments[:200] for r in run.tool_results if r.call.name == TOOL_SEARCH
        ],
        "found_tools": list(run.found_tools),
        "find_tools_found_needed": found,
        # The gate hid the tool, find_tools turned it up, and the model then called it.
        "recovered": bool(
            gated
            and not gate_hit
            and found
            and needed_called
            and searched
            and needed_called[-1] > searched[0]
        ),
        "model_calls": calls,
        "prompt_tokens": run.prompt_tokens,
        "prompt_tokens_per_call": run.prompt_tokens / calls if calls else 0.0,
        "stop_reason": run.stop_reason,
        "answer": run.answer[:500],
        "seconds": round(run.latency_s, 2),
    }


def run_tools_demo(
    model: Backend,
    *,
    tasks: Sequence[ToolTask] | None = None,
    conditions: Sequence[str] = CONDITIONS,
    seeds: Sequence[int] = (0,),
    top_k: int = 5,
    max_steps: int = 4,
    temperature: float = 0.0,
    reply_tokens: int = 200,
    embedding_model: Any = None,
    data_dir: str | os.PathLike[str] | None = None,
    out: Path | None = None,
    progress: TextIO | Literal["stderr"] | None = "stderr",
) -> dict[str, Any]:
    """Run every task under every condition and seed, each in a fresh sandbox; returns
    (and writes to ``out``/summary.json after each condition) the per-condition rates
    and every run's row."""
    chosen = list(TASKS if tasks is None else tasks)
    if not chosen or not seeds:
        raise InvalidArgumentError("the tools demo needs at least one task and one seed")
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown or not conditions:
        raise InvalidArgumentError(f"conditions must be among {CONDITIONS}, got {unknown}")
    if embedding_model is None:
        from rampart.embeddings import default_embedder

        embedding_model = default_embedder()
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress is not None:
            # "stderr": sys.stderr when the message is written, not the stream that
            # was sys.stderr at import (a test's captured one is closed afterwards).
            stream = sys.stderr if progress == "stderr" else progress
            print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=stream, flush=True)

    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        page = stack.enter_context(StatusPage())
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rampart-tools-")))
        sb = Sandbox(tmp / "sandbox")
        reg = base_registry(embedding_model, sb.project, data_dir)
        stack.callback(reg.release)
        offered = gate_misses(reg, chosen, top_k, page.url)
        tools = sb.tools()
        summary: dict[str, Any] = {}
        for condition in conditions:
            seconds = time.perf_counter()
            for seed in seeds:
                kw: dict[str, Any] = {
                    "top_k": top_k,
                    "max_steps": max_steps,
                    "learn": False,  # nothing may change the registry between runs
                    "temperature": temperature,
                    "reply_tokens": reply_tokens,
                }
                agent = _agent(condition, reg, model, tools, kw)
                for task in chosen:
                    sb.reset()
                    agent.check = lambda answer, run, t=task: t.check(sb, answer)
                    run = agent.run(task.text.format(url=page.url), seed=seed)
                    row = _row(task, condition, run, condition != "all")
                    row["seed"] = seed
                    rows.append(row)
                    say(
                        f"{condition:17s} seed {seed} {task.name:12s} "
                        f"{'ok  ' if row['success'] else 'FAIL'} {row['seconds']:6.1f} s "
                        f"{row['prompt_tokens_per_call']:5.0f} tok/call {row['called']}"
                    )
                    summary = _summarise(
                        rows, chosen, offered, model, top_k, max_steps, temperature
                    )
                    summary["seconds"] = round(time.perf_counter() - t0, 1)
                    if out is not None:  # after every run: a run cut short keeps its rows
                        out.mkdir(parents=True, exist_ok=True)
                        text = json.dumps(summary, indent=2) + "\n"
                        (out / "summary.json").write_text(text, encoding="utf-8")
            say(f"{condition}: {time.perf_counter() - seconds:.0f} s")
    return summary


def _summarise(
    rows: list[dict[str, Any]],
    tasks: Sequence[ToolTask],
    offered: dict[str, list[str]],
    model: Backend,
    top_k: int,
    max_steps: int,
    temperature: float,
) -> dict[str, Any]:
    missed = [t.name for t in tasks if not any(n in offered[t.name] for n in t.tools)]
    per: dict[str, Any] = {}
    for cond in CONDITIONS:
        rs = [r for r in rows if r["condition"] == cond]
        if not rs:
            continue
        n = len(rs)
        on_missed = [r for r in rs if r["task"] in missed]
        calls = sum(r["model_calls"] for r in rs)
        per[cond] = {
            "runs": n,
            "success": sum(r["success"] for r in rs) / n,
            "success_on_gate_misses": (
                sum(r["success"] for r in on_missed) / len(on_missed) if on_missed else None
            ),
            "needed_tool_called": sum(r["needed_called"] for r in rs) / n,
            "no_tool_called": sum(not r["called"] for r in rs) / n,
            "find_tools_runs": sum(r["find_tools_calls"] > 0 for r in rs),
            "find_tools_found_needed": sum(r["find_tools_found_needed"] for r in rs),
            "recovered": sum(r["recovered"] for r in rs),
            "model_calls": calls,
            "prompt_tokens_per_call": sum(r["prompt_tokens"] for r in rs) / calls if calls else 0,
            "tools_offered_first_step": sum(r["tools_offered"] for r in rs) / n,
            "seconds": round(sum(r["seconds"] for r in rs), 1),
        }
    return {
        "model": model.describe(),
        "tasks": len(tasks),
        "shorthand_tasks": sum(t.shorthand for t in tasks),
        "top_k": top_k,
        "max_steps": max_steps,
        "temperature": temperature,
        "gate_missed": missed,
        "gate_offered": offered,
        "conditions": per,
        "runs": rows,
    }


def format_summary(s: dict[str, Any]) -> str:
    """The table ``rampart agent tools-demo`` prints."""
    lines = [
        f"model {s['model'].get('model')}, {s['tasks']} tasks ({s['shorthand_tasks']} shorthand), "
        f"top_k {s['top_k']}, max_steps {s['max_steps']}, T={s['temperature']}, "
        f"{s.get('seconds', 0):.0f} s",
        f"gate missed the needed tool on {len(s['gate_missed'])} of {s['tasks']} tasks: "
        + (", ".join(s["gate_missed"]) or "none"),
        f"{'condition':18s} {'success':>8s} {'on misses':>9s} {'tool ok':>8s} "
        f"{'find_tools':>10s} {'recovered':>9s} {'tok/call':>8s} {'s/run':>6s}",
    ]
    for cond, c in s["conditions"].items():
        miss = c["success_on_gate_misses"]
        lines.append(
            f"{cond:18s} {c['success']:8.0%} {'-' if miss is None else f'{miss:.0%}':>9s} "
            f"{c['needed_tool_called']:8.0%} {c['find_tools_runs']:10d} {c['recovered']:9d} "
            f"{c['prompt_tokens_per_call']:8.0f} {c['seconds'] / c['runs']:6.1f}"
        )
    return "\n".join(lines)


def cli_tools_demo(
    *,
    model: str,
    base_url: str | None,
    seeds: str,
    top_k: int,
    max_steps: int,
    temperature: float,
    threads: int | None,
    tasks: str | None,
    conditions: str | None,
    data: str | None,
    out: str | None,
) -> int:
    """Run the experiment and print its table."""
    seed_list = parse_seeds(seeds)
    chosen = TASKS
    if tasks:
        names = [n.strip() for n in tasks.split(",") if n.strip()]
        known = {t.name: t for t in TASKS}
        bad = [n for n in names if n not in known]
        if bad:
            raise InvalidArgumentError(f"--tasks: unknown {bad}; known: {', '.join(known)}")
        chosen = [known[n] for n in names]
    conds = tuple(c.strip() for c in conditions.split(",")) if conditions else CONDITIONS
    # 40 MCP schemas render to ~4k tokens: the "all" condition needs the room.
    backend = experiment_backend(model, base_url, threads, n_ctx=8192)
    try:
        summary = run_tools_demo(
            backend,
            tasks=chosen,
            conditions=conds,
            seeds=seed_list,
            top_k=top_k,
            max_steps=max_steps,
            temperature=temperature,
            data_dir=data,
            out=Path(out) if out else None,
        )
    finally:
        backend.close()
    print(format_summary(summary))
    return 0


@contextlib.contextmanager
def sandbox(root: str | os.PathLike[str] | None = None) -> Iterator[Sandbox]:
    """A built :class:`Sandbox` in a temporary folder (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="rampart-tools-") as tmp:
        sb = Sandbox(Path(root) if root else Path(tmp) / "sandbox")
        sb.reset()
        yield sb


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python experiments/agent_tools_demo.py",
        description="Tasks that each need one of the 40 MCP tools of tests/data, run in a "
        "sandbox where the tools really act; success per condition, gate misses, "
        "find_tools recoveries, prompt tokens per call (docs/agent.md).",
    )
    model_args(p)
    p.add_argument("--seeds", default="0", help="comma list (default 0)")
    p.add_argument("--top-k", type=int, default=5, help="tools the gate offers (default 5)")
    p.add_argument("--max-steps", type=int, default=4, help="model calls per task (default 4)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--tasks", default=None, help="comma list of task names (default: all)")
    p.add_argument(
        "--conditions",
        default=None,
        help="comma list among gated+find_tools,all,gated (default: all three)",
    )
    p.add_argument("--data", default=None, help="folder with the mcp_*_tools.json lists")
    p.add_argument("--out", default=None, help="folder for summary.json")
    args = p.parse_args(argv)
    return run(
        p.prog,
        lambda: cli_tools_demo(
            model=args.model,
            base_url=args.base_url,
            seeds=args.seeds,
            top_k=args.top_k,
            max_steps=args.max_steps,
            temperature=args.temperature,
            threads=args.threads,
            tasks=args.tasks,
            conditions=args.conditions,
            data=args.data,
            out=args.out,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
