"""pytest plugin: guard a registry's compiled prompt and compile latency in CI.

Installed with rampart (entry point ``pytest11``, module :mod:`rampart_pytest`), so
every pytest run of a project that has rampart installed loads it; it adds two
fixtures and one option and does nothing until a test asks for a fixture (no
autouse fixture, no collection hook, and rampart itself, this module included, is
imported only by a test that uses one).

- ``rampart_golden``: ``rampart_golden.check(result, bodies=...)`` snapshots a
  :class:`~rampart.CompileResult`'s prompt, its stable-prefix boundary and request
  bodies byte-exactly to a golden file next to the test
  (``__rampart__/<module>/<test>.json``). A change fails the test with a report
  that names the block whose text changed and says whether it lies in the stable
  prefix (every provider's prompt cache would be rebuilt) or in the task-dependent
  tail.
- ``rampart_latency``: ``rampart_latency(reg.compile, ...)`` runs pytest-benchmark's
  ``benchmark`` on the call and fails when its median exceeds ``ratio`` times the
  median saved in ``__rampart__/<module>/<test>.latency.json``.
- ``pytest --rampart-update`` writes (or refreshes) both kinds of file instead of
  comparing.

See docs/pytest-plugin.md.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rampart_pytest._state import DEFAULT_DIR
from rampart_pytest._state import DEFAULT_RATIO as DEFAULT_RATIO
from rampart_pytest._state import SESSION as _SESSION

# `pytest_plugins = ["rampart.pytest_plugin"]` and `-p rampart.pytest_plugin`
# register the entry point's hooks and fixtures through this (a name, not an
# import: the entry point imports this module, never the other way round).
pytest_plugins = ["rampart_pytest"]

if TYPE_CHECKING:  # rampart is imported by the fixtures, not when pytest starts
    from rampart.block import CompileResult

GOLDEN_FORMAT = "rampart-golden/1"
LATENCY_FORMAT = "rampart-latency/1"
# Failure reports stay readable: at most this many changed blocks get a text diff,
# and a diff at most this many lines.
MAX_BLOCK_DIFFS = 3
MAX_DIFF_LINES = 40
#: The largest golden file or baseline read (docs/limits.md); a golden file holds a
#: prompt and its request bodies, kilobytes to a few megabytes.
MAX_FILE_BYTES = 64 << 20

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
# Characters a test id keeps in its file name; every other one, "%" included, is
# written as %XX (its UTF-8 bytes), so two ids never share a file.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,=+-[]")

Body = Mapping[str, Any] | Callable[["CompileResult"], Mapping[str, Any]]


# ---- files --------------------------------------------------------------------------


def _file_name(test_id: str) -> str:
    """``test_id`` as a file name, injectively: characters outside ``_SAFE`` (and
    ``%``) become ``%XX`` per UTF-8 byte, so ``a/b``, ``a_b`` and ``a:b`` get three
    files (``a%2Fb``, ``a_b``, ``a%3Ab``); an id of safe characters keeps its name."""
    if all(c in _SAFE for c in test_id):
        return test_id
    return "".join(
        c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in test_id
    )


def _test_id(request: pytest.FixtureRequest) -> str:
    """``test_x``, ``TestY.test_x`` or ``test_x[param]``, as a file name
    (:func:`_file_name`); the parts of a node id are joined by ``.``, which no
    class or function name holds."""
    parts = request.node.nodeid.split("::")[1:] or [request.node.name]
    name = _file_name(".".join(parts))
    if len(name) > 120:  # long parameter ids: keep the file name within every OS's limit
        import hashlib

        name = name[:100] + "-" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return name


def _folder(request: pytest.FixtureRequest) -> Path:
    test_file = Path(request.node.path)
    sub = str(request.config.getini("rampart_dir")) or DEFAULT_DIR
    return test_file.parent / sub / test_file.stem


def _write(path: Path, text: str) -> None:
    """Atomically, so an interrupted update never leaves half a golden file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, path)


def _text(path: Path) -> str:
    """A golden file or baseline: a regular file of at most MAX_FILE_BYTES of UTF-8
    (a FIFO would hang the run, /dev/zero fill its memory), else FileProblem."""
    from rampart._files import FileProblem, read_regular_file

    try:
        return read_regular_file(path, MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"is not UTF-8 ({exc})") from None


def _read(path: Path, fmt: str) -> dict[str, Any]:
    from rampart._files import FileProblem

    try:
        data = json.loads(_text(path))
    except (FileProblem, ValueError, RecursionError) as exc:
        pytest.fail(
            f"{path}: unreadable ({exc}); run pytest --rampart-update to rewrite it",
            pytrace=False,
        )
    if not isinstance(data, dict) or data.get("rampart") != fmt:
        pytest.fail(
            f"{path}: not a {fmt} file; run pytest --rampart-update to rewrite it", pytrace=False
        )
    return data


def _current(path: Path) -> str | None:
    """What an update would replace: None when it cannot be read (it is rewritten)."""
    from rampart._files import FileProblem

    try:
        return _text(path)
    except FileProblem:
        return None


def _dumps(value: Any) -> str:
    # Key order is kept (not sorted): it is part of the bytes a request sends.
    return json.dumps(value, indent=1, ensure_ascii=False)


# ---- golden prompts -----------------------------------------------------------------


def _spans(result: CompileResult) -> list[dict[str, Any]]:
    """Each included block's place in the prompt (characters), in compile order.
    The prompt is the blocks' rendered text (wrap prefix + content + wrap suffix)
    joined by the separator; each is found after the previous one."""
    prompt = result.prompt
    out: list[dict[str, Any]] = []
    cursor = 0
    for b in result.included_blocks:
        text = b.wrap_prefix + b.content + b.wrap_suffix
        start = prompt.find(text, cursor)
        if start < 0:  # not rendered as plain text: left out of the map, never guessed
            continue
        end = start + len(text)
        out.append({"name": b.semantic_name, "gated": b.gated, "start": start, "end": end})
        cursor = end
    return out


def _snapshot(
    result: CompileResult, bodies: Mapping[str, Body] | None, nodeid: str
) -> dict[str, Any]:
    if bodies is None:
        import rampart.adapters as adapters
        from rampart.providers import golden_bodies

        bodies = {name: getattr(adapters, name) for name in golden_bodies()}
    built: dict[str, Any] = {}
    for key, body in bodies.items():
        value = body(result) if callable(body) else body
        if not isinstance(value, Mapping):
            raise TypeError(f"rampart_golden: body {key!r} is {type(value).__name__}, not a dict")
        try:
            # A JSON round trip: what is stored is what is compared next time.
            built[key] = json.loads(json.dumps(value, ensure_ascii=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"rampart_golden: body {key!r} is not JSON: {exc}") from None
    return {
        "rampart": GOLDEN_FORMAT,
        "test": nodeid,
        "stable_prefix_chars": result.stable_prefix_chars,
        "stable_prefix_tokens": result.stable_prefix_tokens,
        "total_tokens": result.total_tokens,
        "blocks": _spans(result),
        "prompt": result.prompt,
        "bodies": built,
    }


def _first_diff(a: str, b: str) -> int:
    """Index of the first character where ``a`` and ``b`` differ (the shorter's
    length when one is a prefix of the other). Equal 4 KiB chunks are skipped in C."""
    n, lo, step = min(len(a), len(b)), 0, 4096
    while lo < n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    for i in range(lo, min(lo + step, n)):
        if a[i] != b[i]:
            return i
    return min(lo + step, n) if lo < n else n


def _where(offset: int, spans: Sequence[Mapping[str, Any]]) -> str:
    """The block (or the gap between two) that holds character ``offset``."""
    before = None
    for s in spans:
        if s["start"] <= offset < s["end"]:
            return f"inside block {s['name']!r} (character {offset - s['start']} of the block)"
        if s["start"] > offset:
            if before is None:
                return f"before the first block {s['name']!r}"
            return f"between blocks {before['name']!r} and {s['name']!r}"
        before = s
    if before is None:
        return "in a prompt with no blocks"
    return f"after the last block {before['name']!r}"


def _texts(prompt: str, spans: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """(name#occurrence, text, start) per block, so repeated names pair up in order."""
    seen: dict[str, int] = {}
    out = []
    for s in spans:
        k = seen.get(s["name"], 0)
        seen[s["name"]] = k + 1
        key = s["name"] if k == 0 else f"{s['name']}#{k + 1}"
        out.append((key, prompt[s["start"] : s["end"]], int(s["start"])))
    return out


def _text_diff(old: str, new: str, label: str) -> list[str]:
    import difflib  # only when a check fails: the plugin loads in every pytest run

    lines = list(
        difflib.unified_diff(
            old.splitlines(),
            new.splitlines(),
            f"golden {label}",
            f"current {label}",
            n=1,
            lineterm="",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... ({len(lines) - MAX_DIFF_LINES} more lines)"]
    return ["    " + line for line in lines]


def _block_changes(golden: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    old = _texts(golden["prompt"], golden["blocks"])
    new = _texts(current["prompt"], current["blocks"])
    old_by = {k: (t, s) for k, t, s in old}
    new_by = {k: (t, s) for k, t, s in new}
    stable = int(golden["stable_prefix_chars"])
    lines: list[str] = []
    changed = [k for k, t, _ in new if k in old_by and old_by[k][0] != t]
    for k in changed:
        where = "stable prefix" if old_by[k][1] < stable else "task-dependent tail"
        lines.append(f"  block {k!r} changed ({where})")
    for k in changed[:MAX_BLOCK_DIFFS]:
        lines.extend(_text_diff(old_by[k][0], new_by[k][0], repr(k)))
    lines += [f"  block {k!r} added" for k, _, _ in new if k not in old_by]
    lines += [f"  block {k!r} removed" for k, _, _ in old if k not in new_by]
    common_old = [k for k, _, _ in old if k in new_by]
    common_new = [k for k, _, _ in new if k in old_by]
    if common_old != common_new:
        lines.append(f"  blocks reordered: {common_old} -> {common_new}")
    return lines


def _boundary(snap: Mapping[str, Any]) -> str:
    n = int(snap["stable_prefix_chars"])
    last = [s["name"] for s in snap["blocks"] if s["end"] <= n]
    tail = f", ending with block {last[-1]!r}" if last else ""
    return f"{n} characters ({len(last)} blocks{tail})"


def _path_diff(a: Any, b: Any, path: str) -> tuple[str, str] | None:
    """The first place two JSON values differ: (path, what differs)."""
    if type(a) is not type(b):
        return path, f"{type(a).__name__} became {type(b).__name__}"
    if isinstance(a, dict):
        for k in a:
            if k not in b:
                return f"{path}.{k}", "key removed"
        for k in b:
            if k not in a:
                return f"{path}.{k}", "key added"
        for k in a:
            d = _path_diff(a[k], b[k], f"{path}.{k}")
            if d is not None:
                return d
        if list(a) != list(b):
            return path, f"key order changed: {list(a)} -> {list(b)}"
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = _path_diff(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        if len(a) != len(b):
            return path, f"{len(a)} items became {len(b)}"
        return None
    if isinstance(a, str):
        if a == b:
            return None
        return path, f"string differs from character {_first_diff(a, b)}"
    return None if a == b else (path, f"{a!r} became {b!r}")


def _lookup(value: Any, path: str) -> Any:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, index = part
        try:
            value = value[int(index)] if index else value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _tool_name(body: Any, index: str) -> str:
    tool = _lookup(body, f".tools[{index}]")
    name = None
    if isinstance(tool, dict):
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return f"in tool {name!r}" if name else f"in tool #{index}"


def _string_blame(golden: Mapping[str, Any], before: str, offset: int) -> str:
    """The golden block whose text holds character ``offset`` of a body string
    (the blocks are found in the string one after another: a system prompt, or the
    text blocks a cache-aware adapter splits it into)."""
    spans: list[dict[str, Any]] = []
    cursor = 0
    for name, text, _ in _texts(golden["prompt"], golden["blocks"]):
        start = before.find(text, cursor) if text else -1
        if start >= 0:
            spans.append({"name": name, "start": start, "end": start + len(text)})
            cursor = start + len(text)
    return _where(offset, spans) if spans else ""


def _explain_body(key: str, old: Any, new: Any, golden: Mapping[str, Any]) -> list[str]:
    d = _path_diff(old, new, "")
    if d is None:
        return []
    path, what = d
    blame = ""
    m = re.match(r"\.tools\[(\d+)\]", path)
    before, after = _lookup(old, path), _lookup(new, path)
    if m:
        blame = _tool_name(old, m.group(1))
    elif isinstance(before, str) and isinstance(after, str):
        blame = _string_blame(golden, before, _first_diff(before, after))
    lines = [f"  body {key!r}: {path or '(top level)'}: {what}" + (f", {blame}" if blame else "")]
    lines += _text_diff(_dumps(old), _dumps(new), key)
    return lines


def explain(golden: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Why ``current`` differs from ``golden`` (two snapshots), one line per finding,
    the blocks named; empty when they are byte-identical where it matters (prompt,
    stable-prefix boundary, request bodies)."""
    lines: list[str] = []
    old_p, new_p = golden["prompt"], current["prompt"]
    stable = int(golden["stable_prefix_chars"])
    if old_p != new_p:
        off = _first_diff(old_p, new_p)
        if off < stable:
            effect = (
                f"inside the stable prefix (characters 0-{stable}): every provider's cached "
                "prefix would be rebuilt from here"
            )
        else:
            effect = "after the stable prefix, in the task-dependent tail (the cached prefix holds)"
        lines.append(
            f"prompt: first difference at character {off}, "
            f"{_where(off, golden['blocks'])} in the golden prompt, "
            f"{_where(off, current['blocks'])} now; {effect}"
        )
        lines += _block_changes(golden, current)
    # The boundary moving to another block (not the same block's text growing, which
    # the lines above report) changes what a cache can serve.
    if _boundary(golden).split("(", 1)[1] != _boundary(current).split("(", 1)[1]:
        lines.append(
            f"stable prefix: {_boundary(golden)} in the golden file, {_boundary(current)} now"
        )
    old_b, new_b = golden.get("bodies", {}), current["bodies"]
    for key in [*old_b, *(k for k in new_b if k not in old_b)]:
        if key not in new_b:
            lines.append(f"  body {key!r}: in the golden file, not checked now")
        elif key not in old_b:
            lines.append(f"  body {key!r}: not in the golden file")
        elif _dumps(old_b[key]) != _dumps(new_b[key]):
            lines += _explain_body(key, old_b[key], new_b[key], golden)
    return lines


class RampartGolden:
    """The ``rampart_golden`` fixture: byte-exact snapshots of compiled prompts."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._used: set[Path] = set()

    def path(self, name: str | None = None) -> Path:
        """The golden file of this test (``name``: one of several checks in it)."""
        test = _test_id(self._request)
        if name is not None:
            if not _NAME.fullmatch(name):
                raise ValueError(f"rampart_golden: name {name!r}: use letters, digits, _ . -")
            if name == "latency":  # <test>.latency.json is the test's latency baseline
                raise ValueError("rampart_golden: name 'latency' is the latency baseline's")
            test = f"{test}.{name}"
        return _folder(self._request) / f"{test}.json"

    def check(
        self,
        result: CompileResult,
        bodies: Mapping[str, Body] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        """Compare ``result`` with this test's golden file (write it under
        ``--rampart-update``).

        ``bodies``: request bodies to snapshot with the prompt, by name: a dict, or
        a callable that takes ``result`` and returns one (``lambda r:
        anthropic_messages(r, msgs, model=...)``). Default: ``openai_chat(result)``
        and ``anthropic_messages(result)``; ``{}`` snapshots the prompt alone.
        ``name`` tells apart several checks in one test.
        """
        path = self.path(name)
        if path in self._used:
            raise ValueError(
                f"rampart_golden: {path.name} was already checked in this test; "
                "give each check its own name="
            )
        self._used.add(path)
        snap = _snapshot(result, bodies, self._request.node.nodeid)
        st = self._request.config.stash[_SESSION]
        if st.update:
            text = _dumps(snap) + "\n"
            if not path.exists() or _current(path) != text:
                _write(path, text)
                st.written.append(path)
            return
        if not path.exists():
            pytest.fail(
                f"no golden file {path}: run pytest --rampart-update to write it (and commit it)",
                pytrace=False,
            )
        golden = _read(path, GOLDEN_FORMAT)
        lines = explain(golden, snap)
        if lines:
            pytest.fail(
                "\n".join(
                    [
                        f"compiled prompt differs from {path}",
                        *lines,
                        "if the change is intended: pytest --rampart-update",
                    ]
                ),
                pytrace=False,
            )


# ---- compile latency ----------------------------------------------------------------


def _machine() -> dict[str, Any]:
    import platform

    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }


def _ratio(request: pytest.FixtureRequest) -> tuple[float, str]:
    marker = request.node.get_closest_marker("rampart_latency")
    if marker is not None and (marker.args or "ratio" in marker.kwargs):
        raw: Any = marker.kwargs.get("ratio", marker.args[0] if marker.args else None)
        origin = "the rampart_latency marker"
    else:
        raw = request.config.getini("rampart_latency_ratio")
        origin = "the rampart_latency_ratio ini option"
    try:
        ratio = float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{origin}: ratio {raw!r} is not a number") from None
    if not ratio > 0 or ratio != ratio or ratio == float("inf"):
        raise pytest.UsageError(f"{origin}: ratio must be a positive number, got {raw!r}")
    return ratio, origin


def _seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


class RampartLatency:
    """The ``rampart_latency`` fixture: ``rampart_latency(fn, *args, **kwargs)`` runs
    ``benchmark(fn, *args, **kwargs)`` (pytest-benchmark), returns ``fn``'s result,
    and fails when the median exceeds ``ratio`` x the saved baseline's median.

    ``ratio``: ``@pytest.mark.rampart_latency(ratio=1.3)``, else the
    ``rampart_latency_ratio`` ini option, else 1.5. Benchmarks disabled
    (``--benchmark-disable``): the call runs once and nothing is compared."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    @property
    def path(self) -> Path:
        return _folder(self._request) / f"{_test_id(self._request)}.latency.json"

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        request = self._request
        try:
            bench = request.getfixturevalue("benchmark")
        except pytest.FixtureLookupError:
            raise pytest.UsageError(
                "rampart_latency needs pytest-benchmark: pip install pytest-benchmark"
            ) from None
        ratio, origin = _ratio(request)
        out = bench(fn, *args, **kwargs)
        st = request.config.stash[_SESSION]
        test = request.node.nodeid
        stats = getattr(bench, "stats", None)
        if getattr(bench, "disabled", False) or stats is None:
            st.latency.append(f"{test}: latency not checked (benchmarks are disabled)")
            return out
        median = float(stats.stats.median)
        path = self.path
        if st.update:
            record = {
                "rampart": LATENCY_FORMAT,
                "test": test,
                "median_s": median,
                "min_s": float(stats.stats.min),
                "rounds": int(stats.stats.rounds),
                "machine": _machine(),
            }
            _write(path, _dumps(record) + "\n")
            st.written.append(path)
            st.latency.append(f"{test}: median {_seconds(median)} saved as the baseline")
            return out
        if not path.exists():
            pytest.fail(
                f"no latency baseline {path}: run pytest --rampart-update to save one "
                "(on the machine that will compare with it)",
                pytrace=False,
            )
        base = _read(path, LATENCY_FORMAT)
        raw = base.get("median_s")
        # A number, finite and positive: true is 1.0 to float(), and a ratio to
        # Infinity (or 1e999, which parses as it) would pass every run.
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            pytest.fail(
                f"{path}: median_s must be a number of seconds, got {raw!r:.60}; "
                "run pytest --rampart-update",
                pytrace=False,
            )
        base_median = float(raw)
        if not (math.isfinite(base_median) and base_median > 0):
            pytest.fail(
                f"{path}: median_s must be a finite positive number, got {raw!r:.60}; "
                "run pytest --rampart-update",
                pytrace=False,
            )
        seen = median / base_median
        line = (
            f"{test}: median {_seconds(median)} = {seen:.2f}x the baseline "
            f"{_seconds(base_median)} (limit {ratio:g}x)"
        )
        st.latency.append(line)
        if seen > ratio:
            note = ""
            if base.get("machine") != _machine():
                note = (
                    f"; the baseline was saved on {base.get('machine')}, this is {_machine()}: "
                    "save one per machine with pytest --rampart-update"
                )
            pytest.fail(f"compile latency regressed: {line}, set by {origin}{note}", pytrace=False)
        return out
