"""The optional dependencies as users get them: the newest releases, or the oldest
the extras of pyproject.toml allow (make deps-newest, make deps-oldest).

    dependency_bounds.py requirements   what to install (one per line, for pip)
    dependency_bounds.py constraints    NAME==LOWER for each dependency with a lower
                                        bound (pip -c: the oldest job's pins)
    dependency_bounds.py report         the installed version of each, one a line

The requirements are the core dependencies, the user-facing extras (USER_EXTRAS)
and the "test" extra (the SDKs the integrations adapt, and the test tools). The
constraints pin every one of them to its declared lower bound, except HARNESS
(what runs the tests, not what rampart imports or hands its output to), which
stays at its newest. Where two extras bound one package differently, the higher bound
is the one every extra allows. pip has no "lowest" resolution of its own: the
constraints make the direct dependencies the oldest, their own dependencies
resolve as usual (uv calls this lowest-direct).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip vendors the same parser
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent

#: The extras a user installs (probe, gpu, dev, docs, release and bench are not
#: what the integrations import: llama-cpp builds from source, the GPU build needs
#: CUDA, the rest are tool pins).
USER_EXTRAS = ("hf", "embed", "redis", "postgres", "mcp", "agents", "test")

#: What the "test" extra brings to run the tests, not for rampart to import: the
#: test tools, the web server of examples/fastapi_agents.py, and the chat model and
#: graph runtime the LangChain tests drive the middleware with. Installed at their
#: newest in both jobs (langchain itself pins the langgraph it works with).
HARNESS = frozenset(
    {
        "pytest",
        "pytest-xdist",
        "hypothesis",
        "mypy",
        "fastapi",
        "uvicorn",
        "httpx",
        "langgraph",
        "langchain-openai",
    }
)

# "name[extra,…] (spec)"; markers (";") are not used in pyproject's extras.
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """Every requirement line of the core dependencies and USER_EXTRAS, once each."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    lines: list[str] = list(project["dependencies"])
    for extra in USER_EXTRAS:
        lines += extras[extra]
    seen: set[str] = set()
    out = []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


def _lower_bound(spec: str) -> tuple[int, ...] | None:
    """The version of a ``>=`` clause in ``spec`` (None without one)."""
    for clause in spec.split(","):
        clause = clause.strip()
        if clause.startswith(">="):
            text = clause[2:].strip()
            if not re.fullmatch(r"\d+(\.\d+)*", text):
                raise SystemExit(f"lower bound {clause!r}: only plain release numbers")
            return tuple(int(p) for p in text.split("."))
    return None


def constraints() -> list[str]:
    """``name==lower`` for each non-harness requirement with a lower bound."""
    bounds: dict[str, tuple[int, ...]] = {}
    for line in requirements():
        m = _REQ.match(line)
        if m is None:
            raise SystemExit(f"cannot read requirement {line!r}")
        name, spec = _canonical(m.group(1)), m.group(3)
        if name in HARNESS:
            continue
        low = _lower_bound(spec)
        if low is not None:
            bounds[name] = max(bounds.get(name, low), low)
    return [f"{n}=={'.'.join(map(str, v))}" for n, v in sorted(bounds.items())]


def report() -> list[str]:
    """The installed version of every requirement (and what it was bound to)."""
    specs: dict[str, list[str]] = {}
    for line in requirements():
        m = _REQ.match(line)
        assert m is not None
        specs.setdefault(m.group(1), []).append(line)
    out = []
    for name, lines in specs.items():
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        out.append(f"{name:24} {version:14} ({'; '.join(lines)})")
    return out


def main(argv: list[str]) -> int:
    commands = {"requirements": requirements, "constraints": constraints, "report": report}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: dependency_bounds.py {{{','.join(commands)}}}", file=sys.stderr)
        return 2
    print("\n".join(commands[argv[0]]()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
