"""A registry served over MCP, so any MCP client keeps its instructions in rampart.

``rampart mcp PATHS...`` (or :func:`serve`) starts a stdio server with the official
``mcp`` SDK (``pip install "rampart-registry[mcp]"``) and six tools:

* ``compile_context(task, max_tokens, top_k)``: the compiled context, gated by the
  task when ``top_k`` is given, cut at ``max_tokens``;
* ``find_blocks(task, top_k)``: the blocks most relevant to a task, with scores;
* ``list_blocks()``: every block in registry order;
* ``write_block(content, name, priority)``: a new *agent* block (the client is an
  agent writing what it learned; seed blocks stay read-only);
* ``evict_block(name_or_id)``: remove a block by runtime id or unique name;
* ``find_tools(query, top_k, format)``: the tool blocks a gated ``compile_context``
  may have left out, by exact name first, then by relevance, with their input
  schemas (the way back when the gate misses); ``format="anthropic"`` or
  ``"openai-responses"`` answers in the provider's tool-search form
  (``tool_reference`` blocks, or a ``tool_search_output``'s tools), for a client
  whose own search tool relays the model's search calls here.

A seventh, ``recall(conversation, call_id, query)``, is served when the server has
conversations to read: ``--conversations DIR`` (files :meth:`Conversation.save
<rampart.Conversation.save>` wrote, ``DIR/<conversation>.json``) and/or ``--store``
(conversations kept in the same store, :meth:`Conversation.open
<rampart.Conversation.open>`). It answers the ``recall`` every cleared stub names,
from that conversation's log (:func:`rampart.conversation.answer_recall`): an earlier
tool result by ``call_id``, or the best lines of those that answer ``query``. The
server holds no conversation of its own and appends nothing: whoever compiles the
conversation keeps it (an agent on rampart saving its log after each step, or
appending to the shared store), and a client whose model calls ``recall`` relays the
call here with the conversation's name. A saved file is read again when it changes;
a shared conversation catches up (``sync``) before each answer. Without a directory
or a store the tool is not offered: there is nothing it could answer from.

The tools are coroutines on the registry's asyncio twins (``acompile``,
``afind_relevant``, ``awrite_block``, ``aevict``): a shared registry's write waits
on the store and a new task's embedding on the model without holding up the
server's other requests.

A registry error (a non-evictable block, an unknown name) comes back to the client
as a tool error in the tools' own terms (their argument names, not Python's), not as
a crash of the server; the server logs each failed call as one line on stderr. With
``--store URL --name NAME`` the registry is a shared, durable one
(:meth:`BlockRegistry.open`), so what a client writes outlives the server and other
processes see it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rampart.adapters import TOOL_CHOICES
from rampart.block import CompileResult
from rampart.errors import BlockNotFoundError, EvictionError, InvalidArgumentError, RampartError
from rampart.registry import BlockRegistry

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from rampart.conversation import Conversation

__all__ = ["INSTRUCTIONS", "ConversationSource", "build_server", "open_registry", "serve"]

# What the server tells a client about itself at initialisation; clients that show
# server instructions to the model (Claude Code does) learn when to call what.
INSTRUCTIONS = (
    "rampart keeps this project's instructions as named blocks. Call compile_context "
    "with the task at hand before starting work and follow what it returns; call "
    "write_block to record a lesson worth keeping (one short, actionable rule); "
    "find_blocks and list_blocks show what is stored; evict_block removes a block; "
    "find_tools finds a tool that a gated compile_context left out."
)

_RECALL_INSTRUCTIONS = (
    " A tool result cleared from a conversation to save context names recall: call it "
    "with the conversation's name and the call id the stub gives (or a query)."
)

_PREVIEW = 160  # characters of a block shown by find_blocks / list_blocks


def _require_mcp() -> type[MCPServer[Any]]:
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ImportError(
            f'rampart mcp needs the MCP SDK (mcp>=2): pip install "rampart-registry[mcp]" ({exc})'
        ) from exc
    return MCPServer


# The registry speaks Python (its keyword names and remedies); a client knows only the
# tools' own arguments. Each entry: a pattern of a registry message, and what the
# client is told instead.
_NO_MODEL = (
    "this server has no embedding model (it was started with --no-gate): top_k, "
    "find_blocks and find_tools by description need one; restart it without --no-gate"
)
_PLAIN_NAMES = {"task_text": "task", "semantic_name": "name", "runtime_id": "name_or_id"}


def _client_message(exc: RampartError) -> str:
    """``exc``'s message in the tools' own terms."""
    text = str(exc)
    if isinstance(exc, EvictionError):
        m = re.match(r"block ('[^']*') \(([^)]*)\)", text)
        what = f"block {m.group(1)} ({m.group(2)})" if m else "this block"
        return (
            f"EvictionError: {what} is pinned (a seed or tool block, or one another "
            "registry wrote): evict_block cannot remove it"
        )
    if "has no embedding model" in text:
        return f"{type(exc).__name__}: {_NO_MODEL}"
    if "need a task" in text:
        return f"{type(exc).__name__}: top_k needs a task: pass task"
    for py, tool in _PLAIN_NAMES.items():
        text = re.sub(rf"\b{py}\b", tool, text)
    return f"{type(exc).__name__}: {text}"


@contextmanager
def _tool_errors() -> Iterator[None]:
    """rampart's errors reach the client as tool errors with their message (the SDK
    hides the text of any other exception, as a crash)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except RampartError as exc:
        raise ToolError(_client_message(exc)) from None


class _OneLine(logging.Formatter):
    """Every log record on one line: the SDK logs each failed call, and a
    traceback or a wrapped box per failure buries the ones that matter."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"rampart mcp: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" ({type(exc).__name__}: {exc})"
        return " ".join(text.split())


def _log_one_line() -> None:
    """Route every log record to stderr through :class:`_OneLine`. Installed before
    the SDK's server is built, whose ``logging.basicConfig`` (with rich's boxed
    handler when rich is installed) then finds the root logger configured and
    does nothing."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _preview(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= _PREVIEW else one[: _PREVIEW - 1] + "…"


def _resolve(registry: BlockRegistry, name_or_id: str) -> str:
    """The runtime id that ``name_or_id`` designates: an id, or a name held by
    exactly one block."""
    if name_or_id in registry:
        return name_or_id
    matches = registry.get_by_name(name_or_id)
    if not matches:
        raise BlockNotFoundError(
            f"registry {registry.label!r} has no block with runtime id or name {name_or_id!r}"
        )
    if len(matches) > 1:
        ids = ", ".join(b.runtime_id for b in matches)
        raise InvalidArgumentError(
            f"registry {registry.label!r} has {len(matches)} blocks named {name_or_id!r} "
            f"({ids}); pass one runtime id"
        )
    return matches[0].runtime_id


def tool_choice(result: CompileResult, choice: str) -> dict[str, Any]:
    """``compile_context``'s tool keys for ``tools=choice`` (as the adapters'
    ``tools=``, docs/specification.md §8): ``tools`` in MCP form, and ``allowed_tools`` (names) when
    ``"allowed"`` restricts something."""
    if choice not in TOOL_CHOICES:
        raise InvalidArgumentError(f"tools must be one of {TOOL_CHOICES}, got {choice!r}")
    kept = result.tools("mcp")
    sent = kept if choice == "gated" else result.registry_tools("mcp")
    out: dict[str, Any] = {"tools": sent} if sent else {}
    if choice == "allowed" and len(kept) < len(sent):
        out["allowed_tools"] = [t["name"] for t in kept]
    return out


#: A conversation name ``recall`` takes: letters, digits, ``.``, ``_``, ``-`` (no
#: path separator, no leading dot: a file of the directory, never outside it).
_CONVERSATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
#: Conversations kept loaded (files) or open (store) at most; the least recently used goes.
_KEEP_CONVERSATIONS = 16


class ConversationSource:
    """Where ``recall`` finds a conversation by name: ``directory/<name>.json``
    (a file :meth:`Conversation.save` wrote, loaded again when it changes), else
    the conversation ``name`` in ``store`` (a URL; opened once, synced before each
    answer). Thread-safe; every method may block (file reads, the store)."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, store: str | None = None
    ) -> None:
        if directory is None and store is None:
            raise InvalidArgumentError("a conversation source needs a directory or a store")
        self.directory = None if directory is None else Path(directory).resolve()
        if self.directory is not None and not self.directory.is_dir():
            raise InvalidArgumentError(f"--conversations {directory}: not a directory")
        self.store = store
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, tuple[tuple[int, int], Conversation]] = OrderedDict()
        self._open: OrderedDict[str, Conversation] = OrderedDict()

    def where(self) -> str:
        """Where conversations are looked up, in words (for the tool's errors)."""
        parts = [str(self.directory)] if self.directory is not None else []
        return " and ".join([*parts, *(["the store"] if self.store is not None else [])])

    def get(self, name: str) -> Conversation:
        """The conversation ``name`` (a RampartError when there is none)."""
        if not isinstance(name, str) or not _CONVERSATION_NAME.fullmatch(name):
            raise InvalidArgumentError(
                "conversation is a name of 1-200 letters, digits, '.', '_' and '-', starting "
                f"with a letter or digit; got {str(name)[:80]!r}"
            )
        if self.directory is not None:
            stem = name[: -len(".json")] if name.endswith(".json") else name
            path = self.directory / f"{stem}.json"
            if path.is_file() and path.resolve().parent == self.directory:
                return self._file(path)
        if self.store is not None:
            return self._shared(name)
        raise InvalidArgumentError(f"no conversation named {name!r} in {self.where()}")

    def _file(self, path: Path) -> Conversation:
        from rampart.conversation import Conversation

        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._files.get(path)
            if hit is not None and hit[0] == key:
                self._files.move_to_end(path)
                return hit[1]
        conv = Conversation.load(path)  # bounded and checked entry by entry
        with self._lock:
            self._files[path] = (key, conv)
            self._files.move_to_end(path)
            while len(self._files) > _KEEP_CONVERSATIONS:
                self._files.popitem(last=False)
        return conv

    def _shared(self, name: str) -> Conversation:
        from rampart.conversation import Conversation
        from rampart.stores import open_store

        with self._lock:
            conv = self._open.get(name)
            if conv is not None:
                self._open.move_to_end(name)
        if conv is None:
            assert self.store is not None
            # Its counter is the one it was written with (its metadata says which).
            st = open_store(self.store, create=False)
            try:
                raw = st.meta(name)
            finally:
                close = getattr(st, "close", None)
                if callable(close):
                    close()
            meta = _json_object(raw)
            if raw is None or meta.get("kind") != "conversation":
                what = "no conversation" if raw is None else "not a conversation (a registry?)"
                raise InvalidArgumentError(f"{name!r} in the store: {what}")
            tok = meta.get("tokeniser")
            tok = tok if isinstance(tok, str) else "o200k_base"
            conv = Conversation.open(self.store, name, create=False, tokeniser=tok)
            with self._lock:
                self._open[name] = conv
                while len(self._open) > _KEEP_CONVERSATIONS:
                    self._open.popitem(last=False)[1].close()
        conv.sync()  # what its writers appended since
        return conv

    def close(self) -> None:
        """Close the store connections of the shared conversations opened."""
        with self._lock:
            opened, self._open = list(self._open.values()), OrderedDict()
        for conv in opened:
            conv.close()


def _json_object(raw: bytes | None) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def build_server(
    registry: BlockRegistry,
    *,
    server_name: str = "rampart",
    conversations: ConversationSource | None = None,
) -> MCPServer[Any]:
    """An ``MCPServer`` exposing ``registry`` through the six tools, and ``recall``
    over ``conversations`` when given (not started)."""
    from rampart import __version__
    from rampart.tool_search import TOOL_SEARCH_K, asearch_tools, search_answer

    instructions = INSTRUCTIONS + (_RECALL_INSTRUCTIONS if conversations is not None else "")
    server = _require_mcp()(server_name, instructions=instructions, version=__version__)

    def needs_model() -> None:
        if registry.embedding_model is None:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError(f"RampartError: {_NO_MODEL}")

    @server.tool()
    async def compile_context(
        task: str = "",
        max_tokens: int | None = None,
        top_k: int | None = None,
        tools: str = "gated",
    ) -> dict[str, Any]:
        """Compile the registry's instruction blocks into one context for a task.

        task: what you are about to do (needed when top_k is given).
        max_tokens: token budget for the context; blocks past it are left out.
        top_k: keep only the k blocks most relevant to the task.
        tools: which tool schemas to return: "gated" (those kept), "all" (every one,
        the same list for every task: it keeps a prompt cache), "allowed" (every one,
        plus allowed_tools naming those kept).
        Returns the context text, the names of the included blocks and its size."""
        if top_k is not None:
            needs_model()
        with _tool_errors():
            result = await registry.acompile(
                max_tokens=max_tokens, task_text=task or None, top_k=top_k
            )
        out: dict[str, Any] = {
            "context": result.prompt,
            "included": result.included,
            "excluded": result.excluded,
            "total_tokens": result.total_tokens,
            "stable_prefix_tokens": result.stable_prefix_tokens,
        }
        with _tool_errors():
            out.update(tool_choice(result, tools))
        return out

    @server.tool()
    async def find_blocks(task: str, top_k: int = 5) -> list[dict[str, Any]]:
        """The stored instruction blocks most relevant to a task, best first, with
        their relevance score (cosine similarity, higher is closer)."""
        needs_model()
        with _tool_errors():
            ranked = await registry.afind_relevant(task, top_k=top_k)
        return [
            {
                "runtime_id": b.runtime_id,
                "name": b.semantic_name,
                "score": round(float(score), 4),
                "source": b.source,
                "preview": _preview(b.content),
            }
            for b, score in ranked
        ]

    @server.tool()
    def list_blocks() -> list[dict[str, Any]]:
        """Every stored instruction block in registry order (the order the context
        is compiled in), with its source, priority and size in tokens."""
        return [
            {
                "runtime_id": b.runtime_id,
                "name": b.semantic_name,
                "source": b.source,
                "priority": b.priority,
                "tokens": b.token_count,
                "evictable": b.evictable,
                "preview": _preview(b.content),
            }
            for b in registry.list_blocks()
        ]

    @server.tool()
    async def write_block(content: str, name: str, priority: float = 0.5) -> dict[str, Any]:
        """Store a new instruction block (for example a lesson learned: one short,
        actionable rule). name: a short identifier; priority: 0 to 1, higher is
        kept longer when blocks are evicted. Returns the new block's runtime id."""
        with _tool_errors():
            runtime_id = await registry.awrite_block(content, name, "agent", priority)
        return {"runtime_id": runtime_id, "name": name, "blocks": len(registry)}

    @server.tool()
    async def evict_block(name_or_id: str) -> dict[str, Any]:
        """Remove a stored instruction block, given its runtime id or its name
        (a name must belong to exactly one block)."""
        with _tool_errors():
            block = await registry.aevict(_resolve(registry, name_or_id))
        return {"evicted": block.runtime_id, "name": block.semantic_name, "blocks": len(registry)}

    @server.tool()
    async def find_tools(
        query: str, top_k: int = TOOL_SEARCH_K, format: str = "mcp"
    ) -> list[dict[str, Any]]:
        """Find a tool that a gated compile_context left out. query: the tool's exact
        name, or what it should do. Returns the tools named in the query, or else the
        top_k most relevant tool blocks, each with its description and input schema.
        format: "mcp" (those rows), or the answer to a provider's own tool-search call:
        "anthropic" (tool_reference blocks for a tool_result) or "openai-responses"
        (the tools of a tool_search_output item, in per-server namespaces)."""
        from mcp.server.mcpserver.exceptions import ToolError

        if isinstance(top_k, bool) or not 1 <= top_k <= 100:
            raise ToolError(f"InvalidArgumentError: top_k must be in 1..100, got {top_k!r}")
        if format not in ("mcp", "anthropic", "openai-responses"):
            raise ToolError(
                "InvalidArgumentError: format must be mcp, anthropic or openai-responses, "
                f"got {format!r}"
            )
        with _tool_errors():
            found = await asearch_tools(registry, query, k=top_k)
        if not found and query.strip() and registry.embedding_model is None:
            needs_model()  # no tool has that name, and a description cannot be searched
        if format != "mcp":  # what a client's own search tool hands the provider
            return search_answer(registry, found, format)
        return [
            {
                "name": schema.name,
                "description": schema.description,
                "input_schema": schema.input_schema,
                "matched_by": how,
                "score": None if score is None else round(score, 4),
            }
            for schema, how, score in found
        ]

    if conversations is not None:
        source = conversations

        @server.tool()
        async def recall(conversation: str, call_id: str = "", query: str = "") -> str:
            """Bring back an earlier tool result that was cleared from a conversation to
            save context. conversation: the conversation's name. call_id: the call id
            the cleared result's stub names (that result, whole); query: what you need
            to find (the best lines of every earlier result); both: that result's
            lines for the query."""
            from mcp.server.mcpserver.exceptions import ToolError

            from rampart.conversation import answer_recall

            with _tool_errors():
                conv = await asyncio.to_thread(source.get, conversation)
            args = {"call_id": call_id or None, "query": query or None}
            try:
                answer = await asyncio.to_thread(
                    answer_recall, conv, args, registry.embedding_model
                )
            except Exception as exc:  # the embedding model failing, say
                raise ToolError(f"{type(exc).__name__}: {exc}") from None
            if answer.startswith("error:"):
                raise ToolError(answer)
            return answer

    return server


# ---- every request gets a reply ------------------------------------------------------------
#
# The SDK's stdio transport drops a line it cannot validate without a word to the
# client (its dispatcher logs the error at debug level): a tool call whose
# arguments hold a lone-surrogate escape ("\ud800", which pydantic's JSON parser
# refuses), or a request whose params are not an object, left the client waiting
# forever. The lines are mended in front of the SDK, in a thread between the
# client's stdin and a pipe the SDK reads, so no part of the SDK is replaced:
#
# - a lone-surrogate escape becomes "\ufffd" (U+FFFD), byte for byte in place:
#   tool arguments are model text, repaired as rampart repairs model text
#   everywhere (a pair of escapes that makes one character is left alone);
# - a request the SDK would drop (not JSON-RPC 2.0, a method that is not a
#   string, params that are not an object) becomes a ``ping``
#   with bad params under the same id, which the SDK answers with a JSON-RPC
#   error (-32602): the client gets a reply; stderr says what was wrong;
# - a line that is not JSON, a notification or a request whose id no reply can
#   carry is dropped, with one line on stderr (there is no one to answer).

_LONE_ESCAPE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.S)
_log = logging.getLogger("rampart.mcp")


def mend_surrogate_escapes(line: bytes) -> bytes:
    """``line`` (JSON text) with every escape of a lone UTF-16 surrogate replaced
    by ``\\ufffd``; escaped pairs and everything else left byte for byte. Linear."""
    if _LONE_ESCAPE_HINT.search(line) is None:
        return line
    out: list[bytes] = []
    last = 0
    escapes = list(_ESCAPE.finditer(line))  # in order: "\\\\" is one escape, so parity holds
    i = 0
    while i < len(escapes):
        m = escapes[i]
        cp = int(m.group(1), 16) if m.group(1) else -1
        if 0xD800 <= cp <= 0xDBFF and i + 1 < len(escapes):
            n = escapes[i + 1]
            low = int(n.group(1), 16) if n.group(1) else -1
            if n.start() == m.end() and 0xDC00 <= low <= 0xDFFF:
                i += 2  # a surrogate pair: one character
                continue
        if 0xD800 <= cp <= 0xDFFF:
            out += [line[last : m.start()], b"\\ufffd"]
            last = m.end()
        i += 1
    return b"".join([*out, line[last:]]) if out else line


def mend_line(line: bytes) -> tuple[bytes | None, str | None]:
    """What the SDK is given for one line a client sent (None: nothing), and why
    it differs (None: it does not)."""
    if not line.strip():
        return None, None
    line = mend_surrogate_escapes(line)
    try:
        msg = json.loads(line.decode("utf-8", "replace"))  # as the SDK decodes it
    except RecursionError:
        return line, None  # deeper than Python's parser goes: the SDK's to judge
    except ValueError as exc:
        return None, f"a line that is not JSON was dropped ({exc})"
    if not isinstance(msg, dict) or "method" not in msg:
        return line, None  # a response to the server, or something the SDK answers itself
    problem = None
    if msg.get("jsonrpc") != "2.0":
        problem = 'jsonrpc must be "2.0"'
    elif not isinstance(msg["method"], str):
        problem = "method must be a string"
    elif msg.get("params") is not None and not isinstance(msg["params"], dict):
        problem = "params must be an object"
    if problem is None:
        return line, None
    rid = msg.get("id")
    if "id" not in msg:
        return None, f"a notification was dropped: {problem}"
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None, f"a request was dropped: {problem}, and its id {rid!r:.40} cannot be answered"
    # a request the SDK answers with "Invalid request parameters" under the same id
    reply = {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"_meta": 0}}
    return json.dumps(reply).encode() + b"\n", f"request {rid!r:.40} refused: {problem}"


def _pump(source: int, sink: int) -> None:
    """Copy the client's lines from ``source`` to ``sink``, mended (:func:`mend_line`)."""
    with os.fdopen(source, "rb") as src, os.fdopen(sink, "wb") as dst:
        for raw in src:
            # the SDK reads text lines: a lone \r ends one too
            for line in raw.splitlines():
                try:
                    out, why = mend_line(line)
                except Exception as exc:  # never lose the channel over one line
                    out, why = line, f"a line passed unchecked ({type(exc).__name__}: {exc})"
                if why is not None:
                    _log.warning(why)
                if out is None:
                    continue
                try:
                    dst.write(out if out.endswith(b"\n") else out + b"\n")
                    dst.flush()
                except (OSError, ValueError):
                    return  # the server is gone


@contextmanager
def _mended_stdin() -> Iterator[None]:
    """fd 0 is a pipe fed by :func:`_pump` from the client's stdin, while served."""
    try:
        saved, wire = os.dup(0), os.dup(0)
        read_end, write_end = os.pipe()
    except OSError:  # no stdin to speak of: nothing to mend
        yield
        return
    os.dup2(read_end, 0)
    os.close(read_end)
    threading.Thread(
        target=_pump, args=(wire, write_end), name="rampart-mcp-stdin", daemon=True
    ).start()
    try:
        yield
    finally:
        os.dup2(saved, 0)  # closes the pipe's read end: the pump stops at its next write
        os.close(saved)


def open_registry(
    paths: Sequence[str],
    *,
    store: str | None = None,
    name: str | None = None,
    embedding_model: Any = "default",
    tokeniser: str | None = None,
) -> BlockRegistry:
    """The registry ``rampart mcp`` serves: seed files, or with ``store`` the shared
    registry ``name`` in it (seeded from ``paths`` only when it is created)."""
    if (store is None) != (name is None):
        raise InvalidArgumentError("--store and --name go together")
    if store is not None:
        opener = getattr(BlockRegistry, "open", None)
        if opener is None:  # shared registries (docs/specification.md §7) are not in this build
            raise RampartError(
                "this rampart has no shared registries (BlockRegistry.open): "
                "serve seed files instead of --store/--name"
            )
        reg: BlockRegistry = opener(
            store, name, embedding_model, tokeniser, seeds=list(paths) or None
        )
        return reg
    if not paths:
        raise InvalidArgumentError("rampart mcp needs seed paths, or --store URL --name NAME")
    return BlockRegistry.from_files(list(paths), embedding_model, tokeniser=tokeniser)


def serve(
    paths: Sequence[str],
    *,
    store: str | None = None,
    name: str | None = None,
    tokeniser: str | None = None,
    gate: bool = True,
    conversations: str | os.PathLike[str] | None = None,
) -> None:
    """Serve a registry over stdio until the client disconnects. ``gate=False``
    skips the embedding model (``top_k`` and ``find_blocks`` then fail with the
    registry's message), for a quicker start where no gating is wanted.
    ``conversations``: a directory of saved conversations ``recall`` reads (with
    ``store``, the store's conversations too)."""
    _require_mcp()  # before any model load: a missing SDK should fail at once
    _log_one_line()
    source = None
    if conversations is not None or store is not None:
        source = ConversationSource(conversations, store)
    model: Any = "default" if gate else None
    reg = open_registry(paths, store=store, name=name, embedding_model=model, tokeniser=tokeniser)
    try:
        # stdout is the protocol channel: nothing else may be printed to it.
        print(f"rampart mcp: serving {len(reg)} blocks ({reg.label})", file=sys.stderr)
        with _mended_stdin():
            build_server(reg, conversations=source).run("stdio")
    finally:
        if source is not None:
            source.close()
        close = getattr(reg, "close", None)
        if close is not None:  # a shared registry flushes its access counts
            close()
