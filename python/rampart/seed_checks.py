"""What a seed file from a stranger must pass before it becomes blocks: the
resource limits (docs/limits.md), front matter's YAML loaded with a bounded
node graph, and the checks of each field (priority, tags, name, metadata, the
``exact`` key), each raising a ParseError that names the file and line.

The limits are read where they are used, from this module; one raised on
:mod:`rampart.seeds` (``rampart.seeds.MAX_SEED_BYTES = 64 << 20``, the place
docs/limits.md names) is forwarded here, and every later parse obeys it."""

from __future__ import annotations

import datetime
import functools
import json
import math
from pathlib import Path
from typing import Any

from rampart.errors import ParseError

# Resource limits on untrusted seed files (docs/limits.md). Real seed and skill
# files are kilobytes; these leave two orders of magnitude of room and keep a
# hostile file (an alias bomb, /dev/zero, a FIFO) from taking memory or time.
MAX_SEED_BYTES = 16 << 20
"""Largest seed or skill file read, in bytes; a larger one is a ParseError."""
MAX_FRONT_MATTER_BYTES = 256 << 10
"""Largest front-matter section (the YAML between two ``---`` lines), in bytes."""
MAX_YAML_NODES = 100_000
"""Most YAML nodes a front-matter section may stand for once its aliases are
expanded (what the metadata becomes in JSON): bounds the 'billion laughs'."""
MAX_NAME_BYTES = 65535
"""Longest block name and longest tag list (UTF-8 bytes), as the core enforces."""
MAX_METADATA_DEPTH = 64
"""Deepest nesting of lists and mappings in front-matter metadata."""


class _YamlTooLarge(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def _expanded_size(root: Any) -> None:
    """Raise _YamlTooLarge when the node graph under ``root``, with every alias
    expanded, holds more than MAX_YAML_NODES nodes, nests deeper than
    MAX_METADATA_DEPTH, or refers to itself. Aliases share node objects, so sizes
    are memoised per node: the check costs the *written* size, not the expanded one."""
    import yaml.nodes as yaml_nodes

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    busy: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml_nodes.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml_nodes.MappingNode):
            kids = [n for pair in node.value for n in pair]
        else:
            size[key], depth[key] = 1, 0
            continue
        if done:
            busy.discard(key)
            total = 1 + sum(size[id(k)] for k in kids)
            deep = 1 + max((depth[id(k)] for k in kids), default=0)
            line = node.start_mark.line if node.start_mark is not None else 0
            if total > MAX_YAML_NODES:
                raise _YamlTooLarge(
                    f"front matter expands to more than {MAX_YAML_NODES} YAML nodes "
                    "(aliases repeat what they refer to)",
                    line,
                )
            if deep > MAX_METADATA_DEPTH:
                raise _YamlTooLarge(
                    f"front matter nests deeper than {MAX_METADATA_DEPTH} levels", line
                )
            size[key], depth[key] = total, deep
            continue
        if key in size:
            continue
        if key in busy:
            line = node.start_mark.line if node.start_mark is not None else 0
            raise _YamlTooLarge("front matter holds an alias to itself (a cycle)", line)
        busy.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)


@functools.cache
def _loader() -> Any:
    """The safe loader (libyaml's where PyYAML has it), bounded: the node graph
    is measured before any Python object is built from it. Made on first use:
    ``import rampart`` does not load PyYAML."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            _expanded_size(node)
            return self.construct_document(node)

    return Loader


def _check_priority(value: Any, path: Path, line: int) -> float:
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        p = float(value)  # numpy scalars from a custom parser are numbers too
    except (TypeError, ValueError, OverflowError):
        raise ParseError(
            f"priority must be a number in [0, 1], got {_short(value)}", path=path, line=line
        ) from None
    if not math.isfinite(p) or not 0.0 <= p <= 1.0:
        raise ParseError(f"priority must be in [0, 1], got {_short(value)}", path=path, line=line)
    return p


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _utf8_len(text: str, what: str, path: Path, line: int) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ParseError(
            f"{what} holds a lone surrogate (an escape such as \\ud800), which is not text",
            path=path,
            line=line,
        ) from None


def _check_tags(value: Any, path: Path, line: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ParseError(
            f"tags must be a list of strings, got {_short(value)}", path=path, line=line
        )
    total = 0
    for t in value:
        # The core's rule: a tag is non-empty and free of U+001F (its separator).
        if not t or "\x1f" in t:
            raise ParseError(
                f"tag {_short(t)} is empty or holds the control character U+001F",
                path=path,
                line=line,
            )
        total += _utf8_len(t, "a tag", path, line) + 1
    if total > MAX_NAME_BYTES:
        raise ParseError(
            f"tags take {total} bytes together; at most {MAX_NAME_BYTES} are allowed",
            path=path,
            line=line,
        )
    return tuple(value)


# What the core's name check trims (Rust's char::is_whitespace, Unicode White_Space):
# str.isspace also counts U+001C..U+001F, which a name may consist of.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(map(chr, range(0x2000, 0x200B)))
)


def _check_name(name: Any, path: Path, line: int, *, exact: bool = False) -> str:
    """A block name, stripped of outer blank space unless ``exact`` (front matter
    ``exact: [name]``: the name as written, outer spaces and all)."""
    if exact:
        if not isinstance(name, str) or all(ch in _WHITE_SPACE for ch in name):
            raise ParseError(
                f"name must be a string with a visible character, got {_short(name)}",
                path=path,
                line=line,
            )
        stripped: str = name
    else:
        if not isinstance(name, str) or not name.strip():
            raise ParseError(
                f"name must be a non-empty string, got {_short(name)}", path=path, line=line
            )
        stripped = name.strip()
    n = _utf8_len(stripped, "the name", path, line)
    if n > MAX_NAME_BYTES:
        raise ParseError(
            f"name is {n} bytes long; at most {MAX_NAME_BYTES} are allowed", path=path, line=line
        )
    return stripped


def _plain(value: Any, path: Path, line: int) -> Any:
    """Front-matter metadata as plain JSON values: dates (keys or values) become
    their text, as ``json.dumps(default=str)`` did; binary data, sets and other
    types JSON has no form for are a ParseError here rather than a TypeError at
    insert. Depth is already bounded by the loader (MAX_METADATA_DEPTH)."""
    if isinstance(value, str):
        _utf8_len(value, "a front-matter value", path, line)
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (datetime.date, datetime.datetime)):
        return str(value)
    if isinstance(value, list):
        return [_plain(v, path, line) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, str):
                _utf8_len(k, "a front-matter key", path, line)
                key = k
            elif k is None or isinstance(k, (bool, int, float)):
                key = json.dumps(k)  # what json.dumps does with such a key
            elif isinstance(k, (datetime.date, datetime.datetime)):
                key = str(k)
            else:
                raise ParseError(
                    f"front-matter key {_short(k)} is a {type(k).__name__}; keys must be text",
                    path=path,
                    line=line,
                )
            out[key] = _plain(v, path, line)
        return out
    kind = "binary data (!!binary)" if isinstance(value, bytes) else type(value).__name__
    raise ParseError(
        f"front matter holds {kind}, which has no JSON form; use a string",
        path=path,
        line=line,
    )


EXACT_KEY = "exact"
"""The front-matter key listing the fields a file holds verbatim (``name``,
``content``): what the Markdown form would change (outer blank space, ``\\r``
line ends, a ``---`` line that reads as front matter). ``export_markdown`` writes
it so that every block comes back byte for byte."""
_EXACT_FIELDS = ("name", "content")


def _check_exact(value: Any, path: Path, line: int) -> frozenset[str]:
    if value is None:
        return frozenset()
    if (
        not isinstance(value, list)
        or not all(isinstance(v, str) and v in _EXACT_FIELDS for v in value)
        or not value
    ):
        raise ParseError(
            f"{EXACT_KEY} must list the fields written verbatim ({', '.join(_EXACT_FIELDS)}), "
            f"got {_short(value)}",
            path=path,
            line=line,
        )
    return frozenset(value)


def _exact_content(body: list[str], path: Path, line: int) -> str:
    """The content of an ``exact: [content]`` block: its body is one JSON string
    (escapes keep the line ends, blank space and ``---`` lines Markdown would change)."""
    text = "\n".join(body).strip()
    try:
        if not text.startswith('"'):
            raise ValueError("it does not start with '\"'")
        value = json.loads(text)
    except ValueError as exc:
        raise ParseError(
            f'{EXACT_KEY} lists content, so the body must be one JSON string ("..."): {exc}',
            path=path,
            line=line,
        ) from None
    _utf8_len(value, "the content", path, line)
    return str(value)
