"""Seed files: Markdown with YAML front matter, skill files, and the format registry.

A file holds one block per front-matter section (``---`` / YAML / ``---``) and its
body, up to the next section. A ``---`` line inside a body starts a new section
only when a YAML mapping with ``name:`` follows it; otherwise it is a Markdown rule
and stays body text. Nothing inside a fenced code block is ever a boundary. A file
without front matter is one block named after the file stem, which is how a
SKILL.md or CLAUDE.md imports unchanged.

(Just over 800 lines: the section parser, skill files and the seed library share
one section model and one set of checks; split apart they would import each other.)
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import rampart.seed_checks as checks
from rampart._files import FileProblem, read_regular_file
from rampart._limits import forward_limits
from rampart.errors import (
    BlockNotFoundError,
    InvalidArgumentError,
    ParseError,
    UnsupportedFormatError,
)
from rampart.seed_checks import (
    EXACT_KEY,
    _check_exact,
    _check_name,
    _check_priority,
    _check_tags,
    _exact_content,
    _loader,
    _plain,
    _short,
    _utf8_len,
    _YamlTooLarge,
)

__all__ = [
    "EXACT_KEY",
    "BlockSource",
    "ParserFn",
    "SeedBlock",
    "SeedRegistry",
    "expand_paths",
    "parse_file",
    "register_parser",
]
# The limits docs/limits.md names here; setting one sets it in rampart.seed_checks,
# where the parser reads it.
MAX_SEED_BYTES = checks.MAX_SEED_BYTES
MAX_FRONT_MATTER_BYTES = checks.MAX_FRONT_MATTER_BYTES
MAX_YAML_NODES = checks.MAX_YAML_NODES
MAX_NAME_BYTES = checks.MAX_NAME_BYTES
MAX_METADATA_DEPTH = checks.MAX_METADATA_DEPTH
forward_limits(__name__, checks)


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NAME_KEY = re.compile(r"^name\s*:")
# Headers and hints are split with string methods after this anchored prefix: the
# one-regex forms (a lazy title before "\s*#*\s*$") backtrack cubically on a
# line of spaces, so one 2 000-space header line took 12 s.
_HEADER_START = re.compile(r"(#{2,3})\s+")
_SKILL_NAMES = {"skill.md", "claude.md"}


@dataclass(frozen=True)
class SeedBlock:
    """One parsed block, before it enters a registry."""

    name: str
    content: str
    priority: float = 0.5
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    path: str = ""
    line: int = 1
    #: ``gated: false`` in front matter: the relevance gate never drops it
    #: (docs/specification.md §8).
    gated: bool = True

    @property
    def description(self) -> str | None:
        d = self.metadata.get("description")
        return d if isinstance(d, str) else None

    def metadata_json(self) -> str | None:
        """The front matter beyond the block fields, as the JSON the core stores (None
        when there is none); :class:`ParseError` when it cannot be stored."""
        if not self.metadata:
            return None
        try:
            # YAML may hold dates and the like: keep them as text rather than fail
            # (the parser has already turned them into text; a custom parser may not).
            text = json.dumps(dict(self.metadata), default=str, ensure_ascii=False)
            text.encode("utf-8")  # a lone surrogate cannot reach the core
        except (TypeError, ValueError, RecursionError) as exc:
            raise ParseError(
                f"block {self.name!r}: metadata cannot be stored as JSON ({exc})",
                path=self.path or None,
                line=self.line,
            ) from None
        return text


PathLike = Union[str, "os.PathLike[str]"]
ParserFn = Callable[[Path], Iterable[Sequence[Any]]]


@dataclass(frozen=True)
class BlockSource:
    """A seed file and, optionally, which of its blocks to take (by name)."""

    path: PathLike
    names: Sequence[str] | None = None
    must_match: bool = True


# ---- low-level helpers -----------------------------------------------------------


def stem_name(path: Path) -> str:
    """File stem as a block name: runs of whitespace and '-' become '_'. Bytes of
    the file name that are not UTF-8 become ``\\xNN`` escapes (Python holds them
    as lone surrogates, which no name can hold), so such a file still loads."""
    stem = path.stem
    if not stem.isascii():
        try:
            raw = stem.encode("utf-8", "surrogateescape")  # the name's bytes on disk
        except UnicodeEncodeError:  # a surrogate no file system gave (a str argument)
            raw = stem.encode("utf-8", "backslashreplace")
        stem = raw.decode("utf-8", "backslashreplace")
    return re.sub(r"[\s\-]+", "_", stem).strip("_") or "block"


def _missing(path: str | Path) -> ParseError:
    """The error for a seed path that names nothing (the words of the OS and the CLI)."""
    dangling = os.path.lexists(path)
    return ParseError(
        "broken symbolic link" if dangling else "no such file or directory", path=path
    )


def _read_text(path: Path) -> str:
    try:
        raw = read_regular_file(path, checks.MAX_SEED_BYTES)
    except FileProblem as exc:
        if exc.missing:
            raise _missing(path) from None
        raise ParseError(str(exc), path=path) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ParseError(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            path=path,
            line=line,
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _fence_after(line: str, fence: str | None) -> tuple[str | None, bool]:
    """Code-fence state after ``line``, and whether the line is fence or fenced text
    (CommonMark: a fence closes with the same character, at least as long, and
    nothing after it; "```yaml" inside a fence is text)."""
    m = _FENCE.match(line)
    if fence is None:
        return (m.group(1), True) if m else (None, False)
    if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
        if not line.strip()[len(m.group(1)) :].strip():
            return None, True
    return fence, True


def _find_close(lines: list[str], start: int) -> int | None:
    for k in range(start, len(lines)):
        if lines[k].rstrip() == "---":
            return k
    return None


def _load_yaml(lines: list[str], path: Path, first_line: int) -> Any:
    text = "\n".join(lines)
    if len(text.encode("utf-8", "surrogatepass")) > checks.MAX_FRONT_MATTER_BYTES:
        raise ParseError(
            f"front matter is larger than {checks.MAX_FRONT_MATTER_BYTES} bytes",
            path=path,
            line=first_line,
        )
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except _YamlTooLarge as exc:
        raise ParseError(str(exc), path=path, line=first_line + exc.line) from None
    except yaml.YAMLError as exc:
        # An unclosed bracket is reported at the end of the text; where it opened
        # (the context mark) is the line a person needs to look at.
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = first_line + (mark.line if mark is not None else 0)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParseError(f"malformed YAML front matter: {problem}", path=path, line=line) from None
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError) as exc:
        # Constructors raise these for values YAML allows but Python cannot build
        # (a timestamp out of range, an unhashable key).
        raise ParseError(
            f"malformed YAML front matter: {type(exc).__name__}: {exc}",
            path=path,
            line=first_line,
        ) from None


def _key_lines(fm: list[str], first_line: int) -> dict[str, int]:
    """Line of the first top-level ``key:`` for each key, in one linear pass (a
    scan per key was quadratic: 20 000 keys took 55 s)."""
    out: dict[str, int] = {}
    for k, ln in enumerate(fm):
        head, colon, _ = ln.partition(":")
        if colon and head and not head[0].isspace():
            out.setdefault(head.rstrip(), first_line + k)
    return out


def _first_nonblank(lines: list[str], start: int) -> str:
    for k in range(start, len(lines)):
        if lines[k].strip():
            return lines[k]
    return ""


@dataclass
class _Section:
    meta: dict[str, Any] | None
    fm: list[str]
    fm_line: int  # 1-based line of the opening '---' (1 for a file without one)
    body: list[str]


def _sections(text: str, path: Path) -> list[_Section]:
    lines = text.split("\n")
    n = len(lines)
    out: list[_Section] = []
    i = 0
    while i < n and not lines[i].strip():
        i += 1
    meta: dict[str, Any] | None = None
    fm: list[str] = []
    fm_line = 1
    if i < n and lines[i].rstrip() == "---":
        close = _find_close(lines, i + 1)
        if close is None:
            raise ParseError("unclosed front matter: no closing '---'", path=path, line=i + 1)
        fm = lines[i + 1 : close]
        loaded = _load_yaml(fm, path, i + 2)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ParseError("front matter must be a YAML mapping", path=path, line=i + 2)
        meta, fm_line = loaded, i + 1
        i = close + 1
    body_start = i
    fence: str | None = None
    while i < n:
        line = lines[i]
        fence, fenced = _fence_after(line, fence)
        if not fenced and line.rstrip() == "---":
            close = _find_close(lines, i + 1)
            intends = bool(_NAME_KEY.match(_first_nonblank(lines, i + 1)))
            if close is None:
                if intends:
                    raise ParseError(
                        "unclosed front matter: no closing '---'", path=path, line=i + 1
                    )
            else:
                cand = lines[i + 1 : close]
                if any(_NAME_KEY.match(c) for c in cand):
                    try:
                        loaded = _load_yaml(cand, path, i + 2)
                    except ParseError:
                        # Text that merely mentions "name:" between two rules is
                        # body text; text that *starts* like front matter is an error.
                        if intends:
                            raise
                        loaded = None
                    if isinstance(loaded, dict) and "name" in loaded:
                        out.append(_Section(meta, fm, fm_line, lines[body_start:i]))
                        meta, fm, fm_line = loaded, cand, i + 1
                        i = close + 1
                        body_start = i
                        continue
        i += 1
    out.append(_Section(meta, fm, fm_line, lines[body_start:]))
    return out


def _block_from_section(
    sec: _Section, path: Path, first: bool, default_priority: float
) -> SeedBlock | None:
    content = "\n".join(sec.body).strip()
    if sec.meta is None:
        if not content:
            return None
        return SeedBlock(stem_name(path), content, default_priority, (), {}, str(path), 1)
    meta = dict(sec.meta)
    fm_first = sec.fm_line + 1
    lines = _key_lines(sec.fm, fm_first)
    exact = _check_exact(meta.pop(EXACT_KEY, None), path, lines.get(EXACT_KEY, fm_first))
    if "content" in exact:
        # The body starts after the closing '---' of the front matter.
        content = _exact_content(sec.body, path, sec.fm_line + len(sec.fm) + 2)
    if "name" in meta:
        name = _check_name(
            meta.pop("name"), path, lines.get("name", fm_first), exact="name" in exact
        )
    elif "name" in exact:
        raise ParseError(f"{EXACT_KEY} lists name, but there is no name", path=path, line=fm_first)
    elif first:
        name = stem_name(path)
    else:  # pragma: no cover - later sections are only recognised by their name
        raise ParseError("front matter has no name", path=path, line=sec.fm_line)
    priority = default_priority
    if "priority" in meta:
        priority = _check_priority(meta.pop("priority"), path, lines.get("priority", fm_first))
    tags = _check_tags(meta.pop("tags", None), path, lines.get("tags", fm_first))
    gated = True
    if "gated" in meta:
        gated = meta.pop("gated")
        if not isinstance(gated, bool):
            raise ParseError(
                f"gated must be true or false, got {_short(gated)}",
                path=path,
                line=lines.get("gated", fm_first),
            )
    plain: dict[str, Any] = {}
    for k, v in meta.items():
        plain.update(_plain({k: v}, path, lines.get(str(k), fm_first)))
    meta = plain
    return SeedBlock(name, content, priority, tags, meta, str(path), sec.fm_line, gated)


def _default_priority(path: Path, default: float | None) -> float:
    if default is not None:
        return default
    return 0.9 if path.name.lower() in _SKILL_NAMES else 0.5


def parse_markdown(path: Path, *, default_priority: float | None = None) -> list[SeedBlock]:
    """Parse one Markdown seed file into blocks (file order)."""
    return parse_markdown_text(_read_text(path), path, default_priority=default_priority)


def parse_markdown_text(
    text: str, path: Path, *, default_priority: float | None = None
) -> list[SeedBlock]:
    """Blocks of Markdown seed text as read from ``path`` (line ends already
    ``\\n``); ``path`` names the file in errors and unnamed blocks."""
    prio = _default_priority(path, default_priority)
    blocks = []
    for k, sec in enumerate(_sections(text, path)):
        b = _block_from_section(sec, path, k == 0, prio)
        if b is not None:
            blocks.append(b)
    return blocks


# ---- format registry ---------------------------------------------------------------

_PARSERS: dict[str, ParserFn] = {}
_PARSERS_LOCK = threading.Lock()


def register_parser(extension: str, parser: ParserFn) -> None:
    """Register ``parser(path) -> iterable of (name, content, priority, tags)`` for an
    extension such as ``".txt"`` (call before cold start). ``.md`` is built in."""
    if not isinstance(extension, str) or not re.fullmatch(r"\.[A-Za-z0-9_.+-]+", extension):
        raise ValueError(f"extension must look like '.ext', got {extension!r}")
    if not callable(parser):
        raise TypeError(f"parser must be callable, got {parser!r}")
    with _PARSERS_LOCK:
        _PARSERS[extension.lower()] = parser


def _builtin_markdown(path: Path) -> list[SeedBlock]:
    return parse_markdown(path)


def _from_custom(parser: ParserFn, path: Path) -> list[SeedBlock]:
    try:
        rows = list(parser(path))
    except (ParseError, UnsupportedFormatError):
        raise
    except Exception as exc:
        raise ParseError(f"parser {parser!r} failed: {exc}", path=path) from exc
    out: list[SeedBlock] = []
    for k, row in enumerate(rows):
        if isinstance(row, SeedBlock):
            line = row.line if row.path else k + 1
            _check_name(row.name, path, line)
            _utf8_len(row.content, "the content", path, line)
            _check_priority(row.priority, path, line)
            _check_tags(list(row.tags), path, line)
            row.metadata_json()
            out.append(row)
            continue
        if not isinstance(row, (tuple, list)) or len(row) != 4:
            raise ParseError(
                f"parser returned {row!r} for entry {k}; expected (name, content, priority, tags)",
                path=path,
            )
        name, content, priority, tags = row
        if not isinstance(name, str) or not name.strip() or not isinstance(content, str):
            raise ParseError(f"entry {k}: name and content must be strings", path=path)
        _utf8_len(content, "the content", path, k + 1)
        out.append(
            SeedBlock(
                _check_name(name, path, k + 1),
                content,
                _check_priority(priority, path, k + 1),
                _check_tags(list(tags) if isinstance(tags, tuple) else tags, path, k + 1),
                {},
                str(path),
                k + 1,
            )
        )
    return out


def parse_file(path: PathLike) -> list[SeedBlock]:
    """Parse one seed file with the parser registered for its extension."""
    p = Path(path)
    ext = p.suffix.lower()
    if not _exists(p):  # before the extension: "missing/" has none, and is no format
        raise _missing(os.fspath(path))
    if ext in (".md", ".markdown"):
        with _PARSERS_LOCK:
            custom = _PARSERS.get(ext)
        return _from_custom(custom, p) if custom else parse_markdown(p)
    with _PARSERS_LOCK:
        parser = _PARSERS.get(ext)
    if parser is None:
        known = ", ".join(sorted({".md", ".markdown", *_PARSERS}))
        raise UnsupportedFormatError(
            f"{p}: no parser for extension {ext or '(none)'!r}; known: {known} "
            "(add one with rampart.register_parser)"
        )
    return _from_custom(parser, p)


def _known_extension(p: Path) -> bool:
    ext = p.suffix.lower()
    return ext in (".md", ".markdown") or ext in _PARSERS


def _exists(p: Path) -> bool:
    """False only when nothing is there (Path.exists also says False for a NUL
    byte or a name too long, which the read reports in its own words)."""
    try:
        os.stat(p)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return True


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte: the read says why
        return False


def expand_paths(paths: Iterable[PathLike | BlockSource]) -> Iterator[BlockSource]:
    """Yield one BlockSource per file; a directory stands for its seed files
    (recursively, sorted by path; README and LICENSE files are documentation and
    are skipped)."""
    if isinstance(paths, (str, os.PathLike, BlockSource)):
        paths = [paths]
    try:
        items = list(paths)
    except TypeError:
        raise InvalidArgumentError(
            f"paths must be a path, a BlockSource or a list of them, got {paths!r:.80}"
        ) from None
    for item in items:
        src = item if isinstance(item, BlockSource) else BlockSource(item)
        if not isinstance(src.path, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"a seed path must be a str or PathLike, got {src.path!r:.80}"
            )
        p = Path(src.path)
        if _is_dir(p):
            if src.names is not None:
                raise InvalidArgumentError(
                    f"{p}: BlockSource names apply to a file, not a directory"
                )
            found = sorted(
                f
                for f in p.rglob("*")
                if f.is_file()
                and _known_extension(f)
                and not f.name.upper().startswith(("README", "LICENSE"))
            )
            for f in found:
                yield BlockSource(f)
        else:
            yield src


def load_sources(paths: Iterable[PathLike | BlockSource]) -> list[SeedBlock]:
    """Parse every file, then apply each BlockSource's name selection. Raises before
    returning anything if any file is bad or a required name is missing."""
    out: list[SeedBlock] = []
    missing: list[str] = []
    for src in expand_paths(paths):
        blocks = parse_file(src.path)
        if src.names is None:
            out.extend(blocks)
            continue
        by_name: dict[str, list[SeedBlock]] = {}
        for b in blocks:
            by_name.setdefault(b.name, []).append(b)
        for name in src.names:
            if name in by_name:
                out.extend(by_name[name])
            elif src.must_match:
                missing.append(f"{name!r} in {src.path}")
    if missing:
        raise BlockNotFoundError("requested blocks not found: " + ", ".join(missing))
    return out


# ---- skill files ---------------------------------------------------------------------


def _snake(title: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", title.lower()).strip("_") or "section"


def _parse_hint(hint: str, path: Path, line: int) -> tuple[float | None, tuple[str, ...]]:
    priority: float | None = None
    tags: tuple[str, ...] = ()
    for part in hint.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ParseError(f"header hint {part.strip()!r} is not key=value", path=path, line=line)
        if key == "priority":
            try:
                num = float(value)
            except ValueError:
                raise ParseError(
                    f"priority must be a number in [0, 1], got {value!r}", path=path, line=line
                ) from None
            priority = _check_priority(num, path, line)
        elif key == "tags":
            tags = _check_tags(value.split(), path, line)
        else:
            raise ParseError(f"unknown header hint {key!r} (priority, tags)", path=path, line=line)
    return priority, tags


def _header(line: str) -> tuple[str, str] | None:
    """``("##", "Title")`` for a level-2/3 ATX header line (closing #s and blank
    space removed), else None. Linear in the line."""
    m = _HEADER_START.match(line)
    if m is None:
        return None
    title = line[m.end() :].rstrip().rstrip("#").rstrip()
    return (m.group(1), title) if title else None


def _hint(title: str) -> tuple[str, str] | None:
    """``(hint, title before it)`` when the title ends in ``[key=value, ...]``."""
    if not title.endswith("]"):
        return None
    start = title.rfind("[")
    inner = title[start + 1 : -1]
    if start < 0 or "]" in inner or "=" not in inner:
        return None
    return inner, title[:start].rstrip()


def _split_headers(text: str, path: Path, default_priority: float) -> list[SeedBlock] | None:
    lines = text.split("\n")
    heads: list[tuple[int, tuple[str, str]]] = []
    fence: str | None = None
    for k, line in enumerate(lines):
        fence, fenced = _fence_after(line, fence)
        if fenced:
            continue
        h = _header(line)
        if h:
            heads.append((k, h))
    if not heads:
        return None
    blocks: list[SeedBlock] = []
    preamble = "\n".join(lines[: heads[0][0]]).strip()
    if preamble:
        blocks.append(SeedBlock(stem_name(path), preamble, default_priority, (), {}, str(path), 1))
    seen: dict[str, int] = {}
    for j, (k, h) in enumerate(heads):
        end = heads[j + 1][0] if j + 1 < len(heads) else len(lines)
        level, title = h
        priority: float | None = None
        tags: tuple[str, ...] = ()
        hm = _hint(title)
        if hm:
            priority, tags = _parse_hint(hm[0], path, k + 1)
            title = hm[1]
        name = _snake(title)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        name = _check_name(name, path, k + 1)
        body = "\n".join([f"{level} {title}", *lines[k + 1 : end]]).strip()
        blocks.append(
            SeedBlock(
                name,
                body,
                default_priority if priority is None else priority,
                tags,
                {},
                str(path),
                k + 1,
            )
        )
    return blocks


def parse_skill_file(
    path: PathLike,
    *,
    default_priority: float | None = None,
    splitter: Callable[[str], Iterable[tuple[str, str]]] | None = None,
) -> list[SeedBlock]:
    """Blocks of one skill file (see :meth:`SeedRegistry.from_skill_file`)."""
    p = Path(path)
    prio = _default_priority(p, default_priority)
    text = _read_text(p)
    if text.lstrip().startswith("---"):
        return [
            b
            for k, sec in enumerate(_sections(text, p))
            if (b := _block_from_section(sec, p, k == 0, prio)) is not None
        ]
    if splitter is not None:
        try:
            pairs = list(splitter(text))
        except (ParseError, UnsupportedFormatError):
            raise
        except Exception as exc:
            raise ParseError(f"splitter {splitter!r} failed: {exc}", path=p) from exc
        out = []
        for k, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ParseError(f"splitter returned {pair!r}; expected (name, content)", path=p)
            name, content = pair
            if not isinstance(name, str) or not name.strip() or not isinstance(content, str):
                raise ParseError(f"splitter entry {k}: name and content must be strings", path=p)
            _utf8_len(content, "the content", p, 1)
            out.append(SeedBlock(_check_name(name, p, 1), content.strip(), prio, (), {}, str(p), 1))
        return out
    sections = _split_headers(text, p, prio)
    if sections is not None:
        return sections
    content = text.strip()
    return [SeedBlock(stem_name(p), content, prio, (), {}, str(p), 1)] if content else []


# ---- the seed library ------------------------------------------------------------------


def _namespace(path: Path, root: PathLike | None) -> str:
    is_skill = path.name.lower() in _SKILL_NAMES
    if root is not None:
        try:
            rel = path.resolve().relative_to(Path(root).resolve())
        except ValueError:
            raise InvalidArgumentError(f"{path} is not inside root {root}") from None
        parts = list(rel.parent.parts) if is_skill else [*rel.parent.parts, rel.stem]
        if parts:
            return ".".join(parts)
    # Every skill is called SKILL.md: its folder is the useful name.
    if is_skill and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


class SeedRegistry:
    """The paper's seed library: a read-only, namespaced store filled once at start-up.

    Keys are ``"<namespace>.<semantic_name>"`` (namespace: the file stem, or the
    folder of a SKILL.md). Working registries pull blocks from it with no file I/O
    (``BlockRegistry.from_seed``, ``add_from_seed``).
    """

    __slots__ = ("_blocks", "_by_name")

    def __init__(self, blocks: Iterable[tuple[str, SeedBlock]] = ()) -> None:
        self._blocks: dict[str, SeedBlock] = {}
        self._by_name: dict[str, list[str]] = {}
        for key, block in blocks:
            if key in self._blocks:
                prev = self._blocks[key]
                raise ParseError(
                    f"duplicate seed key {key!r} (first defined at {prev.path}:{prev.line})",
                    path=block.path,
                    line=block.line,
                )
            self._blocks[key] = block
            self._by_name.setdefault(block.name, []).append(key)

    @classmethod
    def from_files(cls, paths: Iterable[PathLike | BlockSource] | PathLike) -> SeedRegistry:
        """Load seed files (directories expand to their seed files); all or nothing."""
        pairs: list[tuple[str, SeedBlock]] = []
        for src in expand_paths(paths):  # type: ignore[arg-type]
            p = Path(src.path)
            blocks = load_sources([src])  # first: a file that cannot be read is a ParseError
            ns = _namespace(p, None)
            pairs.extend((f"{ns}.{b.name}", b) for b in blocks)
        return cls(pairs)

    @classmethod
    def from_skill_file(
        cls,
        path: PathLike,
        *,
        root: PathLike | None = None,
        namespace: str | None = None,
        default_priority: float | None = None,
        splitter: Callable[[str], Iterable[tuple[str, str]]] | None = None,
    ) -> SeedRegistry:
        """Import one skill file.

        With front matter: blocks as in any seed file (an Anthropic-style SKILL.md,
        ``name`` + ``description``, is one block; its description is kept for the
        relevance gate). Without: the ``splitter`` if given, else one block per
        ``##``/``###`` section (``## Title [priority=0.9, tags=a b]`` sets priority
        and tags), else one block. SKILL.md and CLAUDE.md default to priority 0.9.
        """
        p = Path(path)
        blocks = parse_skill_file(p, default_priority=default_priority, splitter=splitter)
        ns = namespace if namespace is not None else _namespace(p, root)
        return cls((f"{ns}.{b.name}", b) for b in blocks)

    def merged(self, *others: SeedRegistry) -> SeedRegistry:
        """A new SeedRegistry holding this one's blocks and the others' (keys must not clash)."""
        pairs = [*self._blocks.items()]
        for o in others:
            pairs.extend(o._blocks.items())
        return SeedRegistry(pairs)

    def get(self, name: str) -> SeedBlock:
        """A block by namespaced key, or by bare name when that name is unique."""
        if name in self._blocks:
            return self._blocks[name]
        keys = self._by_name.get(name, [])
        if len(keys) == 1:
            return self._blocks[keys[0]]
        if len(keys) > 1:
            raise BlockNotFoundError(
                f"seed name {name!r} is ambiguous; use one of the keys {', '.join(keys)}"
            )
        raise BlockNotFoundError(f"no seed block {name!r}")

    def key_of(self, name: str) -> str:
        """The key (as in :meth:`list_names`) of the block ``get(name)`` finds."""
        block = self.get(name)
        return next(k for k, b in self._blocks.items() if b is block)

    def list_names(self, tags: Iterable[str] | None = None) -> list[str]:
        """Keys in load order; with ``tags``, only blocks carrying any of them."""
        if tags is None:
            return list(self._blocks)
        wanted = {tags} if isinstance(tags, str) else set(tags)
        return [k for k, b in self._blocks.items() if wanted.intersection(b.tags)]

    def blocks(self) -> list[SeedBlock]:
        """Every seed block, in load order."""
        return list(self._blocks.values())

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return name in self._blocks or len(self._by_name.get(name, [])) == 1

    def __iter__(self) -> Iterator[str]:
        return iter(self._blocks)

    def __repr__(self) -> str:
        return f"<SeedRegistry {len(self)} blocks>"
