"""Record the tool results of the second needle set (README.md beside this file).

Three real MCP servers from PyPI, driven over stdio by the ``mcp`` client, on public,
permissively licensed material pinned by commit:

* ``mcp-server-fetch``: web pages of FastAPI's documentation (MIT; English, Chinese,
  Japanese, Spanish, German, Russian) and HTTPX's (BSD-3-Clause), rendered from their
  Markdown to HTML as a docs site would and served on 127.0.0.1 by ``http.server``; the
  server's own Markdown conversion (readability + markdownify) is the result;
* ``mcp-server-git``: ``git_show`` of commits of a clone of FastAPI's repository;
* ``mcp-alchemy``: ``execute_query`` / ``schema_definitions`` on the Chinook sample
  database (MIT) in SQLite.

Needs the servers in a venv (``.venv-mcp``: ``pip install mcp-server-fetch==2026.10.24
mcp-server-git==2026.10.19 mcp-alchemy==2026.10.15.202659 markdown``) and the three
repositories at the commits below (``FASTAPI``, ``HTTPX``, ``CHINOOK``: paths to git
directories holding them). Writes outputs.json.gz; make_tasks.py reads only that.

    .venv-mcp/bin/python tests/data/needles2/record.py
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import html
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import markdown
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
OUT = HERE / "outputs.json.gz"
# The repo_path the recorded git calls name: the clone mcp-server-git ran on (kept
# as recorded, so a re-recording is byte-identical).
RECORDED_REPO_PATH = "/" + "work/fastapi"
VENV = Path(sys.executable).parent
PORT = 8765
DB_PATH = Path("/tmp/needles2-record/Chinook_Sqlite.sqlite")
BASE = f"http://127.0.0.1:{PORT}"

REPOS = {
    "fastapi": (
        os.environ["FASTAPI"],
        "c3f316b7e814667e8ee81e03a7330d00ee61e45c",
    ),
    "httpx": (
        os.environ["HTTPX"],
        "ae1b9f66238f75ced3ced5e4485408435de10768",
    ),
    "chinook": (
        os.environ["CHINOOK"],
        "7f67772503d71ba90f19283c38e93923addb43fa",
    ),
}

# Pages an agent fetches: (language, page). FastAPI's docs/<lang>/docs/<page>.md.
FASTAPI_PAGES = {
    "en": [
        "tutorial/query-params",
        "tutorial/cors",
        "tutorial/background-tasks",
        "tutorial/request-files",
        "tutorial/handling-errors",
        "tutorial/metadata",
        "tutorial/static-files",
        "tutorial/testing",
        "advanced/settings",
        "advanced/behind-a-proxy",
        "advanced/websockets",
        "advanced/events",
        "deployment/server-workers",
        "deployment/https",
        "how-to/configure-swagger-ui",
        "fastapi-cli",
    ],
    "zh": [
        "deployment/concepts",
        "deployment/docker",
        "tutorial/middleware",
        "tutorial/security/oauth2-jwt",
        "advanced/custom-response",
        "tutorial/path-params-numeric-validations",
        "async",
        "environment-variables",
        "tutorial/sql-databases",
    ],
    "ja": [
        "deployment/manually",
        "tutorial/first-steps",
        "virtual-environments",
        "tutorial/response-status-code",
        "advanced/templates",
        "tutorial/debugging",
    ],
    "es": [
        "deployment/versions",
        "tutorial/bigger-applications",
        "advanced/generate-clients",
        "tutorial/cookie-params",
    ],
    "de": [
        "advanced/sub-applications",
        "tutorial/dependencies/dependencies-with-yield",
        "how-to/conditional-openapi",
        "python-types",
    ],
    "ru": [
        "benchmarks",
        "tutorial/body-updates",
        "advanced/wsgi",
        "history-design-future",
    ],
}
HTTPX_PAGES = [
    "quickstart",
    "async",
    "http2",
    "compatibility",
    "environment_variables",
    "exceptions",
    "logging",
    "troubleshooting",
    "advanced/timeouts",
    "advanced/ssl",
    "advanced/proxies",
    "advanced/resource-limits",
    "advanced/clients",
    "advanced/authentication",
    "advanced/transports",
    "advanced/event-hooks",
]
# max_length per call, as an agent sets it: CJK pages in fewer characters (3 bytes each).
MAX_LENGTH = {"en": 12_000, "httpx": 12_000, "es": 10_000, "de": 10_000, "ru": 8_000}
MAX_LENGTH_CJK = 5_000

# FastAPI commits an agent looks at (git_show), chosen by size and subject.
GIT_SHOW_COUNT = 14

SQL = [
    ("schema_sales", "schema", ["Customer", "Invoice"]),
    ("schema_catalogue", "schema", ["Track", "Album", "Artist", "Genre", "MediaType"]),
    ("employees", "query", "SELECT * FROM Employee ORDER BY EmployeeId"),
    (
        "customers_4_countries",
        "query",
        "SELECT CustomerId, FirstName, LastName, Company, City, Country, Email, SupportRepId "
        "FROM Customer WHERE Country IN ('Brazil', 'Germany', 'France', 'Canada') "
        "ORDER BY Country, LastName",
    ),
    (
        "genres",
        "query",
        "SELECT g.Name AS Genre, COUNT(*) AS Tracks, ROUND(AVG(t.Milliseconds) / 60000.0, 2) "
        "AS AvgMinutes, ROUND(SUM(t.Bytes) / 1048576.0, 1) AS MiB FROM Track t JOIN Genre g "
        "ON g.GenreId = t.GenreId GROUP BY g.Name ORDER BY Tracks DESC",
    ),
    (
        "revenue_by_country",
        "query",
        "SELECT BillingCountry, COUNT(*) AS Invoices, ROUND(SUM(Total), 2) AS Revenue, "
        "MIN(InvoiceDate) AS FirstInvoice, MAX(InvoiceDate) AS LastInvoice FROM Invoice "
        "GROUP BY BillingCountry ORDER BY Revenue DESC",
    ),
    (
        "chronicle_vol1",
        "query",
        "SELECT t.TrackId, t.Name, t.Composer, t.Milliseconds, t.UnitPrice FROM Track t "
        "JOIN Album a ON a.AlbumId = t.AlbumId WHERE a.Title = :title ORDER BY t.TrackId",
        {"title": "Chronicle, Vol. 1"},
    ),
    (
        "iron_maiden_albums",
        "query",
        "SELECT a.AlbumId, a.Title, COUNT(t.TrackId) AS Tracks FROM Album a JOIN Artist ar ON "
        "ar.ArtistId = a.ArtistId JOIN Track t ON t.AlbumId = a.AlbumId WHERE ar.Name = :name "
        "GROUP BY a.AlbumId ORDER BY a.AlbumId",
        {"name": "Iron Maiden"},
    ),
    (
        "playlists",
        "query",
        "SELECT p.PlaylistId, p.Name, COUNT(pt.TrackId) AS Tracks FROM Playlist p LEFT JOIN "
        "PlaylistTrack pt ON pt.PlaylistId = p.PlaylistId GROUP BY p.PlaylistId ORDER BY "
        "p.PlaylistId",
    ),
    (
        "invoices_over_13",
        "query",
        "SELECT i.InvoiceId, i.InvoiceDate, c.FirstName || ' ' || c.LastName AS Customer, "
        "i.BillingCity, i.BillingCountry, i.Total FROM Invoice i JOIN Customer c ON "
        "c.CustomerId = i.CustomerId WHERE i.Total > 13 ORDER BY i.Total DESC, i.InvoiceId",
    ),
    (
        "support_rep_sales",
        "query",
        "SELECT e.FirstName || ' ' || e.LastName AS SupportRep, COUNT(DISTINCT c.CustomerId) "
        "AS Customers, COUNT(i.InvoiceId) AS Invoices, ROUND(SUM(i.Total), 2) AS Sales FROM "
        "Employee e JOIN Customer c ON c.SupportRepId = e.EmployeeId JOIN Invoice i ON "
        "i.CustomerId = c.CustomerId GROUP BY e.EmployeeId ORDER BY Sales DESC",
    ),
    (
        "longest_tracks",
        "query",
        "SELECT t.Name AS Track, ar.Name AS Artist, t.Milliseconds FROM Track t JOIN Album a ON "
        "a.AlbumId = t.AlbumId JOIN Artist ar ON ar.ArtistId = a.ArtistId ORDER BY "
        "t.Milliseconds DESC LIMIT 40",
    ),
    (
        "customer6_lines",
        "query",
        "SELECT il.InvoiceLineId, i.InvoiceDate, t.Name AS Track, mt.Name AS MediaType, "
        "il.UnitPrice, il.Quantity FROM InvoiceLine il JOIN Invoice i ON i.InvoiceId = "
        "il.InvoiceId JOIN Track t ON t.TrackId = il.TrackId JOIN MediaType mt ON "
        "mt.MediaTypeId = t.MediaTypeId WHERE i.CustomerId = :customer ORDER BY il.InvoiceLineId",
        {"customer": 6},
    ),
    (
        "artists_25_tracks",
        "query",
        "SELECT ar.Name AS Artist, COUNT(DISTINCT a.AlbumId) AS Albums, COUNT(t.TrackId) AS "
        "Tracks FROM Artist ar JOIN Album a ON a.ArtistId = ar.ArtistId JOIN Track t ON "
        "t.AlbumId = a.AlbumId GROUP BY ar.ArtistId HAVING COUNT(t.TrackId) >= 25 ORDER BY "
        "Tracks DESC",
    ),
]


# ---- the docs site: Markdown to HTML, as mkdocs would serve it ---------------------------------


def git_show(repo: str, rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", repo, "show", f"{rev}:{path}"],
        capture_output=True,
        check=True,
    ).stdout.decode("utf-8")


INCLUDE = re.compile(r"^\{\*\s*(\S+)(?:\s+[^*]*)?\*\}\s*$", re.M)
BLOCK = re.compile(r"^///\s*(\w+)\s*(?:\|\s*(.*))?$")


def fastapi_markdown(repo: str, rev: str, lang: str, page: str) -> str:
    text = git_show(repo, rev, f"docs/{lang}/docs/{page}.md")

    def include(m: re.Match[str]) -> str:
        # {* ../../docs_src/x.py hl[..] *}: mkdocs inlines the example file
        rel = m.group(1).split("docs_src/", 1)[-1]
        try:
            code = git_show(repo, rev, f"docs_src/{rel}")
        except subprocess.CalledProcessError:
            return ""
        return f"```python\n{code.rstrip()}\n```"

    text = INCLUDE.sub(include, text)
    out = []
    for line in text.split("\n"):
        b = BLOCK.match(line.strip())
        if b:  # /// tip | Title ... ///: an admonition's title line; the closer goes
            out.append(f"**{b.group(2) or b.group(1).capitalize()}**\n")
        elif line.strip() == "///":
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def to_html(md_text: str, lang: str, title: str) -> str:
    body = markdown.markdown(
        md_text, extensions=["extra", "attr_list", "sane_lists", "toc"], output_format="html"
    )
    return (
        f'<!doctype html>\n<html lang="{lang}"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head><body>"
        '<header><nav><a href="/">Home</a></nav></header>'
        f'<main><article class="md-content">{body}</article></main>'
        "<footer><p>Made with a static site generator</p></footer></body></html>\n"
    )


def build_site(root: Path) -> list[tuple[str, str, str]]:
    """Write the pages; return (source key, url, language) per page."""
    fa_repo, fa_rev = REPOS["fastapi"]
    hx_repo, hx_rev = REPOS["httpx"]
    pages = []
    for lang, names in FASTAPI_PAGES.items():
        for page in names:
            md_text = fastapi_markdown(fa_repo, fa_rev, lang, page)
            title = md_text.split("\n", 1)[0].lstrip("# ").split("{")[0].strip()
            d = root / "fastapi" / lang / page
            d.mkdir(parents=True, exist_ok=True)
            (d / "index.html").write_text(to_html(md_text, lang, title), encoding="utf-8")
            pages.append((f"fastapi/{lang}/{page}", f"{BASE}/fastapi/{lang}/{page}/", lang))
    for page in HTTPX_PAGES:
        md_text = git_show(hx_repo, hx_rev, f"docs/{page}.md")
        title = md_text.split("\n", 1)[0].lstrip("# ").strip()
        d = root / "httpx" / page
        d.mkdir(parents=True, exist_ok=True)
        (d / "index.html").write_text(to_html(md_text, "en", title), encoding="utf-8")
        pages.append((f"httpx/{page}", f"{BASE}/httpx/{page}/", "httpx"))
    return pages


def serve(root: Path) -> http.server.ThreadingHTTPServer:
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(root), **k
    )
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# ---- the MCP calls -------------------------------------------------------------------------------


async def call_all(
    params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any], str]]]:
    """The server's tool list, then each call's result text (its text parts joined)."""
    out = []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        listed = await s.list_tools()
        tools = [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in listed.tools
        ]
        for tool, args in calls:
            res = await s.call_tool(tool, args)
            text = "\n".join(c.text for c in res.content if getattr(c, "type", "") == "text")
            if res.is_error:
                raise SystemExit(f"{tool} {args}: {text[:300]}")
            out.append((tool, args, text))
    return tools, out


def git_commits(clone: str, rev: str) -> list[str]:
    """FastAPI commits worth an agent's look: not release-note bumps; a diff of 1.5-18 KB."""
    log = subprocess.run(
        ["git", "-C", clone, "log", "--format=%H\t%s", "-n", "400", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    picked: list[str] = []
    langs_seen: set[str] = set()
    for line in log:
        sha, subject = line.split("\t", 1)
        if "release notes" in subject.lower() or "bump" in subject.lower():
            continue
        size = len(
            subprocess.run(
                ["git", "-C", clone, "show", "--format=", sha], capture_output=True, check=True
            ).stdout
        )
        if not 2_500 <= size <= 14_000:
            continue
        if subject.startswith("🌐"):
            # a few translation commits, at most one per language
            lang = subject.split(" for ")[-1].split(" ")[0] if " for " in subject else subject
            if lang in langs_seen or len(langs_seen) >= 4:
                continue
            langs_seen.add(lang)
        picked.append(sha)
        if len(picked) == GIT_SHOW_COUNT:
            break
    return picked


def main() -> int:
    outputs: list[dict[str, Any]] = []
    tools: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        pages = build_site(site)
        srv = serve(site)
        try:
            calls = [
                (
                    "fetch",
                    {
                        "url": url,
                        "max_length": MAX_LENGTH.get(lang, MAX_LENGTH_CJK),
                    },
                )
                for _, url, lang in pages
            ]
            fetch = StdioServerParameters(
                command=str(VENV / "python"),
                args=["-m", "mcp_server_fetch", "--allow-private-ips"],
                # No node on PATH: readabilipy would otherwise try `npm install` (no
                # network here) and then fall back; its pure-Python extractor is used.
                env={"PATH": "/nonexistent", "HOME": tmp},
            )
            fetch_tools, fetched = asyncio.run(call_all(fetch, calls))
            tools["mcp-server-fetch"] = fetch_tools
            for (key, _, _), (tool, args, text) in zip(pages, fetched):
                outputs.append(
                    {
                        "id": f"fetch:{key}",
                        "server": "mcp-server-fetch",
                        "tool": tool,
                        "arguments": args,
                        "text": text,
                    }
                )
        finally:
            srv.shutdown()
        clone = str(Path(tmp) / "fastapi")
        subprocess.run(
            ["git", "clone", "-q", "--no-checkout", REPOS["fastapi"][0], clone], check=True
        )
        shas = git_commits(clone, REPOS["fastapi"][1])
        git = StdioServerParameters(
            command=str(VENV / "python"), args=["-m", "mcp_server_git", "--repository", clone]
        )
        calls = [("git_show", {"repo_path": RECORDED_REPO_PATH, "revision": s}) for s in shas]
        # the server is run on the clone; the recorded path is a fixed one
        real = [("git_show", {"repo_path": clone, "revision": s}) for s in shas]
        git_tools, shown_out = asyncio.run(call_all(git, real))
        tools["mcp-server-git"] = git_tools
        for (tool, _, text), (_, shown) in zip(shown_out, calls):
            outputs.append(
                {
                    "id": f"git_show:{shown['revision'][:8]}",
                    "server": "mcp-server-git",
                    "tool": tool,
                    "arguments": shown,
                    "text": text,
                }
            )
        # a fixed path: mcp-alchemy names the database file in its tools' descriptions
        db = DB_PATH
        db.parent.mkdir(parents=True, exist_ok=True)
        db.write_bytes(
            subprocess.run(
                [
                    "git",
                    "--git-dir",
                    REPOS["chinook"][0],
                    "show",
                    f"{REPOS['chinook'][1]}:ChinookDatabase/DataSources/Chinook_Sqlite.sqlite",
                ],
                capture_output=True,
                check=True,
            ).stdout
        )
        sql = StdioServerParameters(
            command=str(VENV / "mcp-alchemy"),
            args=[],
            env={**os.environ, "DB_URL": f"sqlite:///{db}", "EXECUTE_QUERY_MAX_CHARS": "12000"},
        )
        calls2: list[tuple[str, dict[str, Any]]] = []
        for item in SQL:
            if item[1] == "schema":
                calls2.append(("schema_definitions", {"table_names": item[2]}))
            else:
                args: dict[str, Any] = {"query": item[2]}
                if len(item) > 3:
                    args["params"] = item[3]
                calls2.append(("execute_query", args))
        sql_tools, sql_out = asyncio.run(call_all(sql, calls2))
        tools["mcp-alchemy"] = sql_tools
        for item, (tool, args, text) in zip(SQL, sql_out):
            outputs.append(
                {
                    "id": f"sql:{item[0]}",
                    "server": "mcp-alchemy",
                    "tool": tool,
                    "arguments": args,
                    "text": text,
                }
            )
    DB_PATH.unlink(missing_ok=True)
    for o in outputs:
        o["sha256"] = hashlib.sha256(o["text"].encode()).hexdigest()
    versions = {}
    for dist in ("mcp", "mcp-server-fetch", "mcp-server-git", "mcp-alchemy", "markdown"):
        from importlib.metadata import version

        versions[dist] = version(dist)
    doc = {
        "about": "Tool results of mcp-server-fetch, mcp-server-git and mcp-alchemy, recorded "
        "over stdio by tests/data/needles2/record.py (see README.md there).",
        "servers": versions,
        "repositories": {
            "fastapi/fastapi": REPOS["fastapi"][1],
            "encode/httpx": REPOS["httpx"][1],
            "lerocha/chinook-database": REPOS["chinook"][1],
        },
        "tools": tools,
        "outputs": outputs,
    }
    data = json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n"
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        f.write(data)
    for o in outputs:
        n = len(o["text"].encode())
        flag = "" if 1500 <= n <= 18_000 else "  OUT OF RANGE"
        print(f"{n:6d} {o['id']}{flag}")
    print(f"{len(outputs)} outputs -> {OUT.relative_to(HERE.parents[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
