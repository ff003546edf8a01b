"""Running the model's tool calls: the arguments read as a JSON object, a Python
callable called (awaited under :meth:`Agent.arun`) or an MCP session's tool, and
whatever came back as the text fed to the model. A failing tool is an error the
model reads, never an exception out of the loop."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from rampart.errors import InvalidArgumentError
from rampart.integrations import mcp_client
from rampart.llm import ToolCall
from rampart.tools.calls import (  # the repair lives below the agent and the integrations
    CALL_ID,
    NO_NAME,
    RawCall,
    arguments,
    assistant_message,
    prepare,
    repair_items,
)

__all__ = [
    "CALL_ID",
    "NO_NAME",
    "RawCall",
    "arguments",
    "as_text",
    "assistant_message",
    "call_async",
    "call_sync",
    "prepare",
    "repair_items",
    "run_awaitable",
]


def as_text(value: Any) -> str:
    """A tool's return value as the model reads it: a string as it is, else JSON
    (``repr`` for what JSON cannot hold)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def call_sync(functions: Mapping[str, Callable[..., Any]], call: ToolCall) -> tuple[str, bool]:
    """``call`` run by its function (``functions``: tool name -> callable); its text
    and whether it failed."""
    args = arguments(call)
    if isinstance(args, str):
        return args, True
    fn = functions[call.name]
    try:
        value = fn(**args)
        if inspect.isawaitable(value):
            value = run_awaitable(value)
    except Exception as exc:  # the model should see why its call failed
        return f"error: {type(exc).__name__}: {exc}", True
    return as_text(value), False


async def call_async(
    functions: Mapping[str, Callable[..., Any]], sessions: Mapping[str, Any], call: ToolCall
) -> tuple[str, bool]:
    """``call`` run by its MCP session (``sessions``: tool name -> session) or its
    function, awaited when it returns an awaitable."""
    args = arguments(call)
    if isinstance(args, str):
        return args, True
    session = sessions.get(call.name)
    try:
        if session is not None:
            return mcp_client.tool_output(await session.call_tool(call.name, args))
        value = functions[call.name](**args)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}", True
    return as_text(value), False


def run_awaitable(value: Any) -> Any:
    """A coroutine returned by a tool under the sync :meth:`Agent.run`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(value)
    raise InvalidArgumentError(
        "an async tool was called from Agent.run inside a running event loop: "
        "use `await agent.arun(task)`"
    )
