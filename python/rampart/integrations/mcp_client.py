"""An agent's side of MCP: which objects are client sessions, a session's tools
as definitions (every page of ``tools/list``), a tool call's result as text, and
the ``server:NAME`` tag of a server's tools. The SDK (``pip install mcp``) is
imported only when asked which classes are sessions; the rest reads attributes,
so it serves the 1.x and 2.x SDKs alike."""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "list_definitions",
    "looks_like_session",
    "server_tags",
    "session_classes",
    "tool_output",
]


def session_classes() -> tuple[type, ...] | None:
    """The MCP client classes whose tools an agent can call (``mcp.ClientSession``,
    and ``mcp.Client`` where the SDK has one), or None without the mcp package."""
    try:
        import mcp
    except ImportError:
        return None
    return tuple(
        c for c in (getattr(mcp, "ClientSession", None), getattr(mcp, "Client", None)) if c
    )


def looks_like_session(obj: Any) -> bool:
    """Whether ``obj`` has a session's shape (to say that the SDK is missing)."""
    return hasattr(obj, "list_tools") and hasattr(obj, "call_tool") and not callable(obj)


async def list_definitions(session: Any) -> list[dict[str, Any]]:
    """Every tool ``session`` lists, over every page of the listing, each as the
    MCP ``Tool`` object's JSON (what ``parse_tools`` reads)."""
    tools: list[Any] = []
    cursor = None
    while True:  # every page of the listing
        listed = await (session.list_tools(cursor=cursor) if cursor else session.list_tools())
        tools.extend(listed.tools)
        cursor = getattr(listed, "next_cursor", getattr(listed, "nextCursor", None))
        if not cursor:
            break
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def tool_output(result: Any) -> tuple[str, bool]:
    """The text of an MCP ``CallToolResult`` and its ``isError`` flag."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            dump = getattr(item, "model_dump", None)
            parts.append(json.dumps(dump(mode="json")) if dump else str(item))
    structured = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if not parts and structured is not None:
        parts.append(json.dumps(structured))
    # mcp 1.x names the flag isError, 2.x is_error
    flag = getattr(result, "is_error", getattr(result, "isError", False))
    return "\n".join(parts), bool(flag)


def server_tags(session: Any) -> list[str]:
    """``["server:NAME"]`` for an MCP session whose server said its name at
    initialisation (``session.server_info``), else ``[]``: the example gate weighs
    how close a request is to each server's tools (rampart.toolgate.SERVER_TAG).
    The name comes from a stranger: one line, at most 64 characters."""
    from rampart.toolgate import SERVER_TAG

    name = getattr(getattr(session, "server_info", None), "name", None)
    if not isinstance(name, str):
        return []
    name = "-".join(name.split())[:64]
    return [SERVER_TAG + name] if name else []
