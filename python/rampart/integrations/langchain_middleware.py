"""A LangChain v1 agent middleware: each model call compiled by rampart.

``create_agent(model, tools, middleware=[RampartMiddleware(registry, ...)])``: before
every model call the middleware compiles the registry and the agent's messages
together, and the model is called with

* the **system prompt** from the compile (the registry's instruction blocks, gated
  by the task when ``top_k`` is given, under ``max_tokens``);
* the **tools** the gate kept: a tool the registry holds a block for is offered only
  when that block is in the compile (:meth:`RampartMiddleware.load_tools` writes the
  agent's tools into the registry); tools the registry does not know pass through;
* the **messages** as the :class:`rampart.ContextPolicy` compiles them into
  ``context_window - reply_tokens``: old tool results cleared to stubs, spans
  compacted, oldest turns dropped, never a call split from its result.

The agent's state keeps every message as it came; what the middleware changes is
the request only. With a ``context_window`` the middleware also registers a
``recall`` tool (what every cleared stub names) and answers its calls itself from
the thread's conversation (``wrap_tool_call``): an earlier tool result brought back
by ``call_id``, or searched by ``query`` (``recall=False`` turns it off; a tool of
the agent's own named ``recall`` takes the calls instead).

The messages of each thread live in a :class:`rampart.Conversation`
(its log records what the policy did, so later calls repeat the same edits and the
provider's cache of the prefix survives); a thread is recognised by the id of its
first message, and a history edited by something else starts a fresh conversation.

    from langchain.agents import create_agent
    from rampart.integrations.langchain_middleware import RampartMiddleware

    rampart = RampartMiddleware(registry, context_window=128_000, reply_tokens=4_096)
    rampart.load_tools(tools)
    agent = create_agent(model, tools, middleware=[rampart])
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from rampart.conversation import ContextPolicy, Conversation, answer_recall
from rampart.conversation.recall import RECALL_TOOL, RECALL_TOOL_NAME
from rampart.errors import InvalidArgumentError
from rampart.registry import BlockRegistry
from rampart.tools.calls import RawCall, prepare

__all__ = ["RampartMiddleware"]


def _require_langchain() -> Any:
    try:
        from langchain.agents.middleware import AgentMiddleware
    except ImportError as exc:
        raise ImportError(
            "rampart.integrations.langchain_middleware needs LangChain v1: "
            f'pip install "langchain>=1" ({exc})'
        ) from exc
    return AgentMiddleware


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, dict):
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        return name if isinstance(name, str) else None
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) else None


class _Thread:
    """One thread's conversation and the ids of the messages appended to it."""

    __slots__ = ("conversation", "ids")

    def __init__(self) -> None:
        self.conversation = Conversation()
        self.ids: list[str | None] = []


def _middleware_base() -> type:
    return _require_langchain()  # type: ignore[no-any-return]


class RampartMiddleware(_middleware_base()):  # type: ignore[misc]
    """Compiles each model call's system prompt, tools and messages (see the module).

    ``top_k``: gate the registry (instruction and tool blocks together) to the
    ``top_k`` most relevant to the latest user message (needs the registry's
    embedding model). ``context_window`` / ``reply_tokens`` / ``policy``: the
    messages' budget and how it is kept; without ``context_window`` the messages go
    as they came. ``max_threads``: conversations kept (the least recently used
    thread past it is forgotten: its next call starts a fresh conversation).

    ``recall``: with a ``context_window``, register the ``recall`` tool in
    ``self.tools`` (``create_agent`` offers it) and answer its calls from the calling
    thread's conversation, never running the tool node's copy. The tool object's own
    function answers from the thread compiled most recently. A tool of the agent's
    own named ``recall`` wins: LangChain keeps one tool per name, and the middleware
    then passes the calls through to it.
    """

    def __init__(
        self,
        registry: BlockRegistry,
        *,
        top_k: int | None = None,
        max_tokens: int | None = None,
        context_window: int | None = None,
        reply_tokens: int | None = None,
        policy: ContextPolicy | None = None,
        max_threads: int = 256,
        recall: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(registry, BlockRegistry):
            raise InvalidArgumentError(
                f"registry must be a BlockRegistry, got {type(registry).__name__}"
            )
        if policy is not None and not isinstance(policy, ContextPolicy):
            raise InvalidArgumentError(
                f"policy must be a rampart.ContextPolicy, got {type(policy).__name__}"
            )
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise InvalidArgumentError(f"max_threads must be an int >= 1, got {max_threads!r}")
        if not isinstance(recall, bool):
            raise InvalidArgumentError(f"recall must be a bool, got {recall!r}")
        self.registry = registry
        self.top_k = top_k
        self.max_tokens = max_tokens
        self.context_window = context_window
        self.reply_tokens = reply_tokens
        self.policy = policy
        self.max_threads = max_threads
        self.last: Any = None  # the most recent compile (report, message_report)
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._lock = threading.Lock()
        self._last_thread: _Thread | None = None
        # Without a window nothing is cleared, so there is nothing to recall.
        self.recall = recall and context_window is not None
        self._recall_tool: Any = self._make_recall_tool() if self.recall else None
        self.tools = [self._recall_tool] if self._recall_tool is not None else []

    def load_tools(self, tools: Sequence[Any], **kwargs: Any) -> list[str]:
        """Write LangChain tools (``BaseTool``, functions, or OpenAI tool dicts) into
        the registry as tool blocks, so the gate chooses among them; ``kwargs`` go to
        :meth:`BlockRegistry.load_tools` (``gated=False`` keeps them all offered)."""
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.registry.load_tools([convert_to_openai_tool(t) for t in tools], **kwargs)

    # ---- the hooks ---------------------------------------------------------------------

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """LangChain's hook: the model call with the compiled request; the
        model's tool calls repaired as the Agent repairs them (:func:`repair_response`)."""
        return repair_response(handler(self.compile_request(request)), len(request.messages))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """LangChain's async hook: the compile off the loop, then the model call."""
        # The compile may wait on a shared store or the embedding model: off the loop.
        response = await handler(await asyncio.to_thread(self.compile_request, request))
        return repair_response(response, len(request.messages))

    def compile_request(self, request: Any) -> Any:
        """The ``ModelRequest`` with rampart's system prompt, tools and messages."""
        from langchain_core.messages import SystemMessage, convert_to_messages

        messages = list(request.messages)
        task = _latest_user_text(messages)
        with self._lock:
            thread = self._thread(messages)
            args: dict[str, Any] = {"tools_in_prompt": False, "conversation": thread.conversation}
            if self.top_k is not None and task:
                args.update(task_text=task, top_k=self.top_k)
            if self.context_window is not None:
                args.update(
                    context_window=self.context_window,
                    reply_tokens=self.reply_tokens,
                    policy=self.policy,
                )
            result = self.registry.compile(self.max_tokens, **args)
            self._last_thread = thread
        self.last = result
        offered = {t["function"]["name"] for t in result.tools("openai")}
        known = {t["function"]["name"] for t in result.registry_tools("openai")}
        tools = [t for t in request.tools if _tool_name(t) not in known or _tool_name(t) in offered]
        system = result.prompt
        own = request.system_message
        if own is not None and own.text:
            # The agent's own system prompt stays, after the compiled instructions.
            system = f"{system}\n\n{own.text}" if system else own.text
        return request.override(
            system_message=SystemMessage(system) if system else own,
            tools=tools,
            messages=convert_to_messages(result.messages("openai_chat")),
        )

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """LangChain's tool hook: a call of rampart's ``recall`` answered here, any
        other call run by ``handler``."""
        if not self._answers(request):
            return handler(request)
        return self._recall_message(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """LangChain's async tool hook: ``recall`` answered off the loop (the query
        search may run the embedding model)."""
        if not self._answers(request):
            return await handler(request)
        return await asyncio.to_thread(self._recall_message, request)

    def _answers(self, request: Any) -> bool:
        call = getattr(request, "tool_call", None)
        return (
            self._recall_tool is not None
            and isinstance(call, Mapping)
            and call.get("name") == RECALL_TOOL_NAME
            # the tool node's recall is ours (an agent's own recall tool replaces it)
            and getattr(request, "tool", None) is self._recall_tool
        )

    def _recall_message(self, request: Any) -> Any:
        """The ``ToolMessage`` answering a ``recall`` call from its thread's log."""
        from langchain_core.messages import ToolMessage

        call = request.tool_call
        state = request.state
        messages = state.get("messages") if isinstance(state, Mapping) else None
        if messages is None:
            messages = getattr(state, "messages", None) or []
        answer = self.answer(call.get("args"), list(messages))
        return ToolMessage(
            answer,
            tool_call_id=str(call.get("id") or ""),
            name=RECALL_TOOL_NAME,
            status="error" if answer.startswith("error:") else "success",
        )

    def answer(self, arguments: Any, messages: Sequence[Any] | None = None) -> str:
        """The ``recall`` answer (:func:`rampart.conversation.answer_recall`) from
        the conversation of the thread ``messages`` belong to (found by the first
        message's id, nothing appended); without ``messages``, the thread compiled
        most recently. A bad call is an ``error:`` string, never an exception."""
        try:
            conv = self._conversation_of(messages)
            if conv is None:
                return (
                    "error: no conversation has been compiled yet: recall answers from "
                    "the thread this middleware compiled"
                )
            return answer_recall(conv, arguments, self.registry.embedding_model)
        except Exception as exc:  # the model reads why; the agent goes on
            return f"error: {type(exc).__name__}: {exc}"

    def _conversation_of(self, messages: Sequence[Any] | None) -> Conversation | None:
        """The thread's conversation (a history the middleware has not seen, or
        edited since, is read into a scratch one: the state holds every message)."""
        from langchain_core.messages import convert_to_openai_messages

        with self._lock:
            if messages is None:
                return None if self._last_thread is None else self._last_thread.conversation
            if messages:
                key = str(getattr(messages[0], "id", None) or id(messages[0]))
                thread = self._threads.get(key)
                ids = [getattr(m, "id", None) for m in messages]
                if (
                    thread is not None
                    and None not in thread.ids
                    and ids[: len(thread.ids)] == thread.ids
                ):
                    return thread.conversation
        scratch = Conversation()
        if messages:
            scratch.append(convert_to_openai_messages(list(messages)))
        return scratch

    def _make_recall_tool(self) -> Any:
        """The ``recall`` ``StructuredTool`` (the schema every provider is offered);
        its function answers from the thread compiled most recently."""
        from langchain_core.tools import StructuredTool

        spec = RECALL_TOOL["function"]

        def recall(call_id: str | None = None, query: str | None = None, **_: Any) -> str:
            return self.answer({"call_id": call_id, "query": query})

        return StructuredTool.from_function(
            func=recall,
            name=RECALL_TOOL_NAME,
            description=spec["description"],
            args_schema=dict(spec["parameters"]),
        )

    def _thread(self, messages: list[Any]) -> _Thread:
        """This thread's conversation, with the messages not yet in it appended."""
        from langchain_core.messages import convert_to_openai_messages

        key = str(getattr(messages[0], "id", None) or id(messages[0])) if messages else ""
        thread = self._threads.get(key)
        ids = [getattr(m, "id", None) for m in messages]
        if thread is None or ids[: len(thread.ids)] != thread.ids or None in thread.ids:
            thread = _Thread()  # new, or its history was edited: start again from it
        new = messages[len(thread.ids) :]
        if new:
            thread.conversation.append(convert_to_openai_messages(new))
            thread.ids.extend(ids[len(thread.ids) :])
        self._threads[key] = thread
        self._threads.move_to_end(key)
        while len(self._threads) > self.max_threads:
            self._threads.popitem(last=False)
        return thread


def repair_response(response: Any, step: int) -> Any:
    """The model's reply with its tool calls repaired as the
    :class:`~rampart.agent.Agent` repairs them (:func:`rampart.tools.calls.prepare`):
    a null, empty, repeated or unusable call id becomes ``call_<step>_<n>``,
    unique in the reply, and a name no tool can have becomes ``invalid_tool_name``
    (LangChain's tool node then answers it with an error), before the reply
    enters the agent's state: the tool node answers each call under its own id,
    and every provider takes the history. ``response``: what a
    ``wrap_model_call`` handler returns (a ``ModelResponse``, an ``AIMessage``,
    or an ``ExtendedModelResponse``); one that needs nothing comes back as it is."""
    inner = getattr(response, "model_response", None)  # ExtendedModelResponse
    if inner is not None:
        fixed = repair_response(inner, step)
        if fixed is not inner:
            from dataclasses import replace

            return replace(response, model_response=fixed)
        return response
    result = getattr(response, "result", None)  # ModelResponse
    if isinstance(result, list):
        messages = [_repaired_message(m, step) for m in result]
        if any(a is not b for a, b in zip(messages, result)):
            from dataclasses import replace

            return replace(response, result=messages)
        return response
    return _repaired_message(response, step)


def _repaired_message(message: Any, step: int) -> Any:
    calls = getattr(message, "tool_calls", None)
    invalid = getattr(message, "invalid_tool_calls", None)
    if getattr(message, "type", None) != "ai" or not (calls or invalid):
        return message
    calls, invalid = list(calls or ()), list(invalid or ())
    raw = [RawCall(c.get("id"), c.get("name"), c.get("args")) for c in calls + invalid]
    fixed = [
        {**c, "id": call.id, "name": call.name}
        for c, (call, _) in zip(calls + invalid, prepare(raw, step))
    ]
    if all(
        f["id"] == c.get("id") and f["name"] == c.get("name")
        for f, c in zip(fixed, calls + invalid)
    ):
        return message
    return message.model_copy(
        update={"tool_calls": fixed[: len(calls)], "invalid_tool_calls": fixed[len(calls) :]}
    )


def _latest_user_text(messages: Sequence[Any]) -> str:
    for m in reversed(messages):
        if getattr(m, "type", None) == "human":
            text = getattr(m, "text", None)
            return text if isinstance(text, str) else str(m.content)
    return ""
