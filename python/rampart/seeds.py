"""Seed files: Markdown with YAML front matter, skill files, and the format registry.

A file holds one block per front-matter section (``---`` / YAML / ``---``) and its
body, up to the next section. A ``---`` line inside a body starts a new section
only when a YAML mapping with ``name:`` follows it; otherwise it is a Markdown rule
and stays body text. Nothing inside a fenced code block is ever a boundary. A file
without front matter is one block named after the file stem, which is how a
SKILL.md or CLAUDE.md imports unchanged.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from rampart.errors import BlockNotFoundError, ParseError, UnsupportedFormatError

__all__ = [
    "BlockSource",
    "ParserFn",
    "SeedBlock",
    "SeedRegistry",
    "expand_paths",
    "parse_file",
    "register_parser",
]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NAME_KEY = re.compile(r"^name\s*:")
_HEADER = re.compile(r"^(#{2,3})\s+(.+?)\s*#*\s*$")
_HINT = re.compile(r"\s*\[([^\[\]]*=[^\[\]]*)\]\s*$")
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

    @property
    def description(self) -> str | None:
        d = self.metadata.get("description")
        return d if isinstance(d, str) else None

    def metadata_json(self) -> str | None:
        if not self.metadata:
            return None
        # YAML may hold dates and the like: keep them as text rather than fail.
        return json.dumps(dict(self.metadata), default=str, ensure_ascii=False)


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
    """File stem as a block name: runs of whitespace and '-' become '_'."""
    return re.sub(r"[\s\-]+", "_", path.stem).strip("_") or "block"


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ParseError("file not found", path=path) from None
    except IsADirectoryError:
        raise ParseError("is a directory, not a seed file", path=path) from None
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
    try:
        return yaml.load("\n".join(lines), Loader=_Loader)
    except yaml.YAMLError as exc:
        # An unclosed bracket is reported at the end of the text; where it opened
        # (the context mark) is the line a person needs to look at.
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = first_line + (mark.line if mark is not None else 0)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ParseError(f"malformed YAML front matter: {problem}", path=path, line=line) from None


def _key_line(fm: list[str], key: str, first_line: int) -> int:
    pat = re.compile(rf"^{re.escape(key)}\s*:")
    for k, ln in enumerate(fm):
        if pat.match(ln):
            return first_line + k
    return first_line


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


def _check_priority(value: Any, path: Path, line: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(
            f"priority must be a number in [0, 1], got {value!r}", path=path, line=line
        )
    p = float(value)
    if not math.isfinite(p) or not 0.0 <= p <= 1.0:
        raise ParseError(f"priority must be in [0, 1], got {value!r}", path=path, line=line)
    return p


def _check_tags(value: Any, path: Path, line: int) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ParseError(f"tags must be a list of strings, got {value!r}", path=path, line=line)
    return tuple(value)


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
    if "name" in meta:
        name = meta.pop("name")
        if not isinstance(name, str) or not name.strip():
            line = _key_line(sec.fm, "name", fm_first)
            raise ParseError(f"name must be a non-empty string, got {name!r}", path=path, line=line)
        name = name.strip()
    elif first:
        name = stem_name(path)
    else:  # pragma: no cover - later sections are only recognised by their name
        raise ParseError("front matter has no name", path=path, line=sec.fm_line)
    priority = default_priority
    if "priority" in meta:
        priority = _check_priority(
            meta.pop("priority"), path, _key_line(sec.fm, "priority", fm_first)
        )
    tags = _check_tags(meta.pop("tags", None), path, _key_line(sec.fm, "tags", fm_first))
    return SeedBlock(name, content, priority, tags, meta, str(path), sec.fm_line)


def _default_priority(path: Path, default: float | None) -> float:
    if default is not None:
        return default
    return 0.9 if path.name.lower() in _SKILL_NAMES else 0.5


def parse_markdown(path: Path, *, default_priority: float | None = None) -> list[SeedBlock]:
    """Parse one Markdown seed file into blocks (file order)."""
    text = _read_text(path)
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
        out.append(
            SeedBlock(
                name.strip(),
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


def expand_paths(paths: Iterable[PathLike | BlockSource]) -> Iterator[BlockSource]:
    """Yield one BlockSource per file; a directory stands for its seed files
    (recursively, sorted by path; README and LICENSE files are documentation and
    are skipped)."""
    if isinstance(paths, (str, os.PathLike, BlockSource)):
        paths = [paths]
    for item in paths:
        src = item if isinstance(item, BlockSource) else BlockSource(item)
        p = Path(src.path)
        if p.is_dir():
            if src.names is not None:
                raise ValueError(f"{p}: BlockSource names apply to a file, not a directory")
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
            tags = tuple(value.split())
        else:
            raise ParseError(f"unknown header hint {key!r} (priority, tags)", path=path, line=line)
    return priority, tags


def _split_headers(text: str, path: Path, default_priority: float) -> list[SeedBlock] | None:
    lines = text.split("\n")
    heads: list[tuple[int, re.Match[str]]] = []
    fence: str | None = None
    for k, line in enumerate(lines):
        fence, fenced = _fence_after(line, fence)
        if fenced:
            continue
        h = _HEADER.match(line)
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
        title = h.group(2)
        priority: float | None = None
        tags: tuple[str, ...] = ()
        hm = _HINT.search(title)
        if hm:
            priority, tags = _parse_hint(hm.group(1), path, k + 1)
            title = title[: hm.start()].rstrip()
        name = _snake(title)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}_{seen[name]}"
        body = "\n".join([f"{h.group(1)} {title}", *lines[k + 1 : end]]).strip()
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
        out = []
        for k, pair in enumerate(splitter(text)):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ParseError(f"splitter returned {pair!r}; expected (name, content)", path=p)
            name, content = pair
            if not isinstance(name, str) or not name.strip() or not isinstance(content, str):
                raise ParseError(f"splitter entry {k}: name and content must be strings", path=p)
            out.append(SeedBlock(name.strip(), content.strip(), prio, (), {}, str(p), 1))
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
        rel = path.resolve().relative_to(Path(root).resolve())
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
            ns = _namespace(p, None)
            blocks = load_sources([src])
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
        block = self.get(name)
        return next(k for k, b in self._blocks.items() if b is block)

    def list_names(self, tags: Iterable[str] | None = None) -> list[str]:
        """Keys in load order; with ``tags``, only blocks carrying any of them."""
        if tags is None:
            return list(self._blocks)
        wanted = {tags} if isinstance(tags, str) else set(tags)
        return [k for k, b in self._blocks.items() if wanted.intersection(b.tags)]

    def blocks(self) -> list[SeedBlock]:
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
