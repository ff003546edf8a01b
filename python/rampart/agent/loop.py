"""The agent loop (:class:`Agent`): one generator, ``_loop``, that yields what it
needs (a compile, a model call, a tool call, a registry step) and two drivers that
perform it, :meth:`Agent.run` in place and :meth:`Agent.arun` on the event loop
(docs/design.md, House rules, "Sans-IO core, thin drivers"). Learning, the quarantine, the agent's
own tools and the calls of the model's tools live in the modules beside this one;
the package docstring (:mod:`rampart.agent`) describes the whole."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any

import rampart._args as _args
from rampart.agent import builtin, calls, judge, lessons
from rampart.agent.builtin import (
    MEMORY_NAMES,
    MEMORY_TOOLS,
    RECALL_TOOL,
    RECALL_TOOL_NAME,
    TOOL_SEARCH,
    TOOL_SEARCH_TOOL,
)
from rampart.agent.quarantine import Quarantine, QuarantinedLesson
from rampart.agent.records import Action, CheckFn, Lesson, Run, Step, ToolResult, add_usage
from rampart.agent.text import clip
from rampart.block import CompileResult, InstructionBlock
from rampart.conversation import ContextPolicy, Conversation
from rampart.errors import BlockNotFoundError, InvalidArgumentError
from rampart.integrations import mcp_client
from rampart.llm import Backend, Reply
from rampart.registry import BlockRegistry
from rampart.tools import ToolSchema, tool_schema

__all__ = ["Agent"]


class Agent:
    """A tool-calling agent whose context is compiled from ``registry``.

    ``model``: a :class:`rampart.llm.Backend` (``OpenAIBackend``, ``LlamaCppBackend``
    or any object with the same ``chat``). ``tools``: Python callables and/or MCP
    client sessions. ``max_tokens``: the compile budget per step (default: the
    registry's). ``top_k``: gate the registry to the ``top_k`` blocks most relevant
    to the task (needs the registry's embedding model). ``check(answer, run)``:
    returns ``True``/``False`` or ``(ok, reason)``; without it, a learning agent asks
    the model to judge. ``reply_tokens``: the model's reply limit per call.

    ``trusted_tools``: names (or the callables) of tools whose output the operator
    vouches for; every other tool's output is untrusted, and a rule from a run that
    read it is quarantined (``quarantine``: a :class:`Quarantine` to share, ``True``
    for a fresh one, ``False`` to compile such rules at once, as before).
    ``tool_search``: offer ``find_tools`` beside the gated tools (default: when
    ``top_k`` gates). ``max_calls_per_step``: the tool calls of one reply that run
    (default 32); the rest are answered with an error the model can act on, so a
    reply listing thousands of calls costs thirty-two tool runs, not thousands.

    ``context_window``: the model's window in tokens; each step's request
    (instructions + tools + messages) then fits it less ``reply_tokens``, the
    messages managed by ``policy`` (default ``ContextPolicy()``). Without it the
    messages are sent as they are, as before. With it the agent offers ``recall``
    (what every cleared stub names) and answers it from the conversation's log; a
    tool of your own named ``recall`` is offered and called instead.
    """

    def __init__(
        self,
        registry: BlockRegistry,
        model: Backend,
        tools: Iterable[Any] = (),
        *,
        max_steps: int = 8,
        max_tokens: int | None = None,
        top_k: int | None = None,
        learn: bool = True,
        check: CheckFn | None = None,
        memory_tools: bool = False,
        reply_tokens: int = 512,
        temperature: float = 0.0,
        max_tool_result_chars: int = 4000,
        max_rule_chars: int = 300,
        duplicate_threshold: float | None = None,
        lesson_priority: float = 0.6,
        trusted_tools: Iterable[str | Callable[..., Any]] = (),
        quarantine: Quarantine | bool = True,
        tool_search: bool | None = None,
        learn_tools: bool | None = None,
        max_calls_per_step: int = 32,
        context_window: int | None = None,
        policy: ContextPolicy | None = None,
    ) -> None:
        if not isinstance(registry, BlockRegistry):
            raise InvalidArgumentError(
                f"registry must be a BlockRegistry, got {type(registry).__name__}"
            )
        if not callable(getattr(model, "chat", None)):
            raise InvalidArgumentError(
                f"model must have a chat() method (a rampart.llm backend), got "
                f"{type(model).__name__}"
            )
        for value, what in (
            (max_steps, "max_steps"),
            (reply_tokens, "reply_tokens"),
            (max_tool_result_chars, "max_tool_result_chars"),
            (max_rule_chars, "max_rule_chars"),
            (max_calls_per_step, "max_calls_per_step"),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{what} must be an int >= 1, got {value!r}")
        if context_window is not None and (
            isinstance(context_window, bool)
            or not isinstance(context_window, int)
            or context_window <= reply_tokens
        ):
            raise InvalidArgumentError(
                f"context_window must be an int above reply_tokens ({reply_tokens}) or None, "
                f"got {context_window!r}"
            )
        if policy is not None and not isinstance(policy, ContextPolicy):
            raise InvalidArgumentError(
                f"policy must be a rampart.ContextPolicy or None, got {type(policy).__name__}"
            )
        if top_k is not None:
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
                raise InvalidArgumentError(f"top_k must be an int >= 1 or None, got {top_k!r}")
            if registry.embedding_model is None:
                raise InvalidArgumentError(
                    f"top_k={top_k} gates by relevance, but registry {registry.label!r} has no "
                    "embedding model: pass embedding_model= to it, or top_k=None"
                )
        if check is not None and not callable(check):
            raise InvalidArgumentError("check must be a callable(answer, run)")
        if duplicate_threshold is not None and not (
            0.0 < _args.number(duplicate_threshold, "duplicate_threshold") <= 1.0
        ):
            raise InvalidArgumentError(
                f"duplicate_threshold must be in (0, 1], got {duplicate_threshold!r}"
            )
        _args.priority(lesson_priority)  # written with every lesson: refused now, not then
        if _args.number(temperature, "temperature") < 0:
            raise InvalidArgumentError(f"temperature must be >= 0, got {temperature!r}")
        if not isinstance(trusted_tools, (str, Iterable)):
            raise InvalidArgumentError(
                f"trusted_tools holds tool names or the tool callables, got {trusted_tools!r}"
            )
        if not isinstance(tools, Iterable):
            raise InvalidArgumentError(
                f"tools must be a list of callables and MCP sessions, got {type(tools).__name__}"
            )
        self.registry = registry
        self.model = model
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.learn = learn
        if learn_tools is not None and not isinstance(learn_tools, bool):
            raise InvalidArgumentError(f"learn_tools must be a bool or None, got {learn_tools!r}")
        self.learn_tools = learn if learn_tools is None else learn_tools
        self.check = check
        self.memory_tools = memory_tools
        self.reply_tokens = reply_tokens
        self.temperature = temperature
        self.max_tool_result_chars = max_tool_result_chars
        self.max_rule_chars = max_rule_chars
        self.max_calls_per_step = max_calls_per_step
        self.context_window = context_window
        self.policy = policy
        self.duplicate_threshold = duplicate_threshold
        self.lesson_priority = lesson_priority
        trusted: set[str] = set()
        for t in [trusted_tools] if isinstance(trusted_tools, str) else trusted_tools:
            name = t if isinstance(t, str) else getattr(t, "__name__", None)
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    f"trusted_tools holds tool names or the tool callables, got {t!r}"
                )
            trusted.add(name)
        self.trusted_tools = frozenset(trusted)
        if isinstance(quarantine, Quarantine):
            self.quarantine: Quarantine | None = quarantine
        elif isinstance(quarantine, bool):
            self.quarantine = Quarantine() if quarantine else None
        else:
            raise InvalidArgumentError(
                f"quarantine must be a Quarantine or a bool, got {type(quarantine).__name__}"
            )
        if tool_search is not None and not isinstance(tool_search, bool):
            raise InvalidArgumentError(f"tool_search must be a bool or None, got {tool_search!r}")
        self.tool_search = top_k is not None if tool_search is None else tool_search
        self._vectors: dict[str, Any] = {}  # quarantined rule text -> its embedding
        self._functions: dict[str, Callable[..., Any]] = {}
        self._sessions: list[Any] = []
        self._mcp_tools: dict[str, Any] = {}  # tool name -> its session
        self._mcp_listed = False
        self._wire: dict[str, dict[str, Any]] = {}  # tool block id -> OpenAI tool dict
        schemas: list[ToolSchema] = []
        session_cls = mcp_client.session_classes()
        for i, t in enumerate(tools):
            if session_cls and isinstance(t, session_cls):
                self._sessions.append(t)
            elif callable(t):
                s = tool_schema(t)
                if s.name in self._functions or s.name in MEMORY_NAMES:
                    raise InvalidArgumentError(f"tools[{i}]: a second tool named {s.name!r}")
                self._check_search_clash(s.name, f"tools[{i}]")
                self._functions[s.name] = t
                schemas.append(s)
            elif session_cls is None and mcp_client.looks_like_session(t):
                raise ImportError(
                    f"tools[{i}] looks like an MCP client session ({type(t).__name__}), but the "
                    "mcp package is not installed: pip install mcp"
                )
            else:
                raise InvalidArgumentError(
                    f"tools[{i}] must be a callable or an mcp.ClientSession, got {type(t).__name__}"
                )
        self._load([s.to_openai() for s in schemas])

    # ---- tool blocks ----------------------------------------------------------------

    def _check_search_clash(self, name: str, where: str) -> None:
        if self.tool_search and name == TOOL_SEARCH:
            raise InvalidArgumentError(
                f"{where}: a tool named {TOOL_SEARCH!r} clashes with the gate's fallback "
                "tool: rename it, or pass tool_search=False"
            )

    def _load(self, definitions: list[dict[str, Any]], tags: Sequence[str] = ()) -> None:
        """Write tool blocks for the definitions the registry does not hold yet.
        Pinned (not evictable), so the model's ``forget`` cannot drop a tool."""
        if not definitions:
            return
        have = {s.name for b in self.registry.find_by_tag("tool") if (s := b.tool_schema)}
        new = [d for d in definitions if _definition_name(d) not in have]
        if new:
            self.registry.load_tools(new, evictable=False, tags=list(tags))

    async def _list_mcp(self) -> None:
        if self._mcp_listed:
            return
        listings: list[tuple[list[dict[str, Any]], list[str]]] = []
        for session in self._sessions:
            definitions = await mcp_client.list_definitions(session)
            listings.append((definitions, mcp_client.server_tags(session)))
            for d in definitions:
                name = d["name"]
                if name in self._functions or name in self._mcp_tools:
                    raise InvalidArgumentError(f"two tools named {name!r} (MCP session)")
                self._check_search_clash(name, "an MCP session")
                self._mcp_tools[name] = session
        for definitions, tags in listings:
            self._load(definitions, tags)
        self._mcp_listed = True

    # ---- running ----------------------------------------------------------------------------

    def run(self, task: str, *, seed: int = 0, conversation: Conversation | None = None) -> Run:
        """Run ``task`` to an answer (or ``max_steps``); learn from it if it failed.

        ``conversation``: the session to continue (``task`` is appended to it as the
        next user message); default: a new one, in ``Run.conversation``."""
        if self._sessions:
            raise InvalidArgumentError(
                "this agent has MCP session tools, which are async: use `await agent.arun(task)` "
                "inside the session's event loop"
            )
        loop = self._loop(task, seed, conversation)
        action: Action = next(loop)
        while True:
            try:
                if action[0] == "chat":
                    _, messages, tools, limit = action  # type: ignore[misc]
                    action = loop.send(self._chat(messages, tools, limit, seed))
                elif action[0] == "compile":
                    action = loop.send(self._compile(action[1], action[2]))  # type: ignore[arg-type,misc]
                elif action[0] == "step":
                    _, fn, args = action  # type: ignore[misc]
                    action = loop.send(fn(*args))  # type: ignore[misc,operator]
                else:
                    action = loop.send(calls.call_sync(self._functions, action[1]))  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def arun(
        self, task: str, *, seed: int = 0, conversation: Conversation | None = None
    ) -> Run:
        """:meth:`run` for async code: awaits MCP tools and coroutine functions, and
        runs the (blocking) model call in a worker thread."""
        await self._list_mcp()
        loop = self._loop(task, seed, conversation)
        action: Action = next(loop)
        while True:
            try:
                if action[0] == "chat":
                    _, messages, tools, limit = action  # type: ignore[misc]
                    reply = await asyncio.to_thread(self._chat, messages, tools, limit, seed)
                    action = loop.send(reply)
                elif action[0] == "compile":
                    action = loop.send(await self._acompile(action[1], action[2]))  # type: ignore[arg-type,misc]
                elif action[0] == "step":
                    _, fn, args = action  # type: ignore[misc]
                    action = loop.send(await asyncio.to_thread(fn, *args))  # type: ignore[misc,arg-type]
                else:
                    call = action[1]
                    action = loop.send(
                        await calls.call_async(self._functions, self._mcp_tools, call)  # type: ignore[arg-type]
                    )
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], limit: int, seed: int
    ) -> Reply:
        return self.model.chat(
            messages,
            temperature=self.temperature,
            seed=seed,
            max_tokens=limit,
            tools=tools or None,
        )

    def _compile_args(self, task: str, conversation: Conversation) -> dict[str, Any]:
        args: dict[str, Any] = {"tools_in_prompt": False, "conversation": conversation}
        if self.top_k is not None:
            args.update(task_text=task, top_k=self.top_k)
        if self.context_window is not None:
            args.update(context_window=self.context_window, reply_tokens=self.reply_tokens)
            args["policy"] = self.policy
        return args

    def _compile(self, task: str, conversation: Conversation) -> CompileResult:
        return self.registry.compile(self.max_tokens, **self._compile_args(task, conversation))

    async def _acompile(self, task: str, conversation: Conversation) -> CompileResult:
        return await self.registry.acompile(
            self.max_tokens, **self._compile_args(task, conversation)
        )

    def _offered(self, result: CompileResult, found: Sequence[str] = ()) -> list[dict[str, Any]]:
        # Only tools this agent can run: a tool block with no implementation here
        # (loaded for another agent) would only invite a failing call.
        tools = []
        # The agent compiles with tools_in_prompt=False, so every included tool block
        # is a tools-only block of the selection. Their wire form is built once per
        # block: result.tools() would parse and re-validate every schema on every step
        # (~50 µs for a dozen tools), and result.report builds a row per block.
        for native in result._sel.tools_only_blocks():
            rid = native.runtime_id
            tool = self._wire.get(rid)
            if tool is None:
                schema = InstructionBlock(native).tool_schema
                tool = self._wire[rid] = schema.to_openai() if schema else {}
            name = tool.get("function", {}).get("name")
            if name in self._functions or name in self._mcp_tools:
                tools.append(tool)
        if found:  # what find_tools turned up: offered whatever the gate says now
            have = {t["function"]["name"] for t in tools}
            for name in found:
                wire = self._wire_by_name(name)
                if wire and name not in have:
                    tools.append(wire)
                    have.add(name)
        if self.memory_tools:
            tools.extend(MEMORY_TOOLS)
        if self.tool_search and (self._functions or self._mcp_tools):
            tools.append(TOOL_SEARCH_TOOL)
        if self._offers_recall():
            tools.append(RECALL_TOOL)
        return tools

    def _offers_recall(self) -> bool:
        """Whether rampart's ``recall`` is offered: the policy may clear (a window),
        and no tool of the user's has the name (theirs is never shadowed)."""
        return (
            self.context_window is not None
            and RECALL_TOOL_NAME not in self._functions
            and RECALL_TOOL_NAME not in self._mcp_tools
        )

    def _wire_by_name(self, name: str) -> dict[str, Any] | None:
        """The OpenAI tool dict of this agent's tool ``name`` (from its tool block)."""
        for b in self.registry.get_by_name(name):
            schema = b.tool_schema
            if schema is not None and schema.name == name:
                wire = self._wire.get(b.runtime_id)
                if wire is None:
                    wire = self._wire[b.runtime_id] = schema.to_openai()
                return wire
        return None

    def _loop(
        self, task: str, seed: int, conversation: Conversation | None = None
    ) -> Generator[Action, Any, Run]:
        if not isinstance(task, str) or not task.strip():
            raise InvalidArgumentError("task must be a non-empty string")
        _args.text(task, "task")  # compiled, sent and written to the conversation
        if conversation is not None and not isinstance(conversation, Conversation):
            raise InvalidArgumentError(
                f"conversation must be a rampart.Conversation, got {type(conversation).__name__}"
            )
        t_run = time.perf_counter()
        run = Run(task=task, trajectory_id=f"run-{uuid.uuid4().hex[:16]}")
        conv = run.conversation = Conversation() if conversation is None else conversation
        trajectory = run.trajectory_id
        # Appends are registry-like steps: a conversation in a shared store writes to it,
        # so arun makes them on a worker thread, never on the event loop.
        append = functools.partial(conv.append, trajectory_id=trajectory)
        yield ("step", append, ({"role": "user", "content": task},))
        reply: Reply | None = None
        for index in range(self.max_steps):
            t_step = time.perf_counter()
            # What the model has read before it makes this step's calls: results of
            # this step's own calls reach it only on the next step.
            tainted = run.tainted
            result = yield ("compile", task, conv)
            tools = self._offered(result, run.found_tools)
            messages: list[dict[str, Any]] = []
            if result.prompt:
                messages.append({"role": "system", "content": result.prompt})
            # The conversation as compiled: with a window, old tool results cleared,
            # compacted or dropped by the policy; without one, every message as it came.
            messages.extend(result.messages("openai_chat"))
            t_model = time.perf_counter()
            reply = yield ("chat", messages, tools, self.reply_tokens)
            model_s = time.perf_counter() - t_model
            add_usage(run, reply)
            if reply.prompt_tokens is not None:
                yield ("step", conv.observe_usage, ({"prompt_tokens": reply.prompt_tokens},))
            step = Step(index, result, reply, [t["function"]["name"] for t in tools])
            step.model_s = model_s
            run.steps.append(step)
            if not reply.calls:
                step.latency_s = time.perf_counter() - t_step
                run.answer = reply.text
                if reply.text:  # the session goes on from the answer
                    yield ("step", append, (calls.assistant_message(reply.text, ()),))
                break
            # The calls as recorded: ids unique and usable by every provider, a
            # missing or invalid name answered with an error (calls.prepare), so an
            # append never refuses what a model wrote.
            prepared = calls.prepare(reply.calls, index)
            yield ("step", append, (calls.assistant_message(reply.text, prepared),))
            results: list[dict[str, Any]] = []
            offered = set(step.tools_offered)
            for n_call, (call, problem) in enumerate(prepared):
                t_tool = time.perf_counter()
                if n_call >= self.max_calls_per_step:
                    # Every call still gets an answer: the chat API wants one per id.
                    output, is_error = (
                        f"error: not run: at most {self.max_calls_per_step} tool calls run "
                        "per step; call it again in the next step if it is still needed",
                        True,
                    )
                elif problem is not None:
                    output, is_error = problem, True
                elif call.name not in offered:
                    output, is_error = (
                        f"error: no tool {call.name!r} is available in this step "
                        f"(offered: {', '.join(sorted(offered)) or 'none'})",
                        True,
                    )
                elif call.name in MEMORY_NAMES:
                    output, is_error = yield ("step", builtin.memory, (self, call, run, tainted))
                elif call.name == TOOL_SEARCH and self.tool_search:
                    allowed = (*self._functions, *self._mcp_tools)
                    step_args = (self.registry, call, run, allowed)
                    output, is_error = yield ("step", builtin.find_tools, step_args)
                elif call.name == RECALL_TOOL_NAME and self._offers_recall():
                    recall_args = (self.registry, conv, call, run, self.trusted_tools)
                    output, is_error = yield ("step", builtin.recall, recall_args)
                else:
                    output, is_error = yield ("tool", call)
                    # Its output (an error message too) may carry a stranger's text.
                    if call.name not in self.trusted_tools and call.name not in run.untrusted_reads:
                        run.untrusted_reads.append(call.name)
                output = clip(output, self.max_tool_result_chars)
                step.results.append(
                    ToolResult(call, output, is_error, time.perf_counter() - t_tool)
                )
                results.append({"role": "tool", "tool_call_id": call.id, "content": output})
            yield ("step", append, (results,))
            step.latency_s = time.perf_counter() - t_step
        else:
            run.stop_reason = "max_steps"
            run.answer = reply.text if reply is not None else ""
        yield from judge.assess(self, run)
        if run.success:
            own = {TOOL_SEARCH, *((RECALL_TOOL_NAME,) if self._offers_recall() else ())}
            called = [
                r.call.name
                for r in run.tool_results
                if not r.is_error and r.call.name not in MEMORY_NAMES and r.call.name not in own
            ]
            # It may write tool examples (the store, the model): a registry step.
            yield ("step", self.after_success, (task, list(dict.fromkeys(called)), run))
        run.latency_s = time.perf_counter() - t_run
        return run

    def after_success(self, task: str, tools_called: Sequence[str], run: Run) -> None:
        """Called once after each successful run with its task and the tools it
        called without error (first-call order, no repeats, internal tools left out).

        With ``learn_tools`` (default: as ``learn``), ``task`` becomes an example
        request of each tool called that is a tool block of the registry
        (:meth:`BlockRegistry.add_tool_example`: an agent write of this run, so
        ``forget(run)`` takes it back, journaled on shared registries), and the
        gate finds that tool for similar requests from then on. A run that read
        untrusted tool output teaches nothing: a page the model read may have told
        it which tool to call (as with lessons). Override to change the rule."""
        if not self.learn_tools or run.untrusted_reads:
            return
        for name in tools_called:
            try:
                self.registry.add_tool_example(name, task, trajectory_id=run.trajectory_id)
            except (BlockNotFoundError, InvalidArgumentError):
                continue  # not a tool block of this registry (an MCP-only tool, say)

    # ---- lessons and the quarantine (rampart.agent.lessons) -------------------------------

    def lessons(self) -> list[InstructionBlock]:
        """The rules learned so far (blocks tagged ``lesson``), registry order."""
        return lessons.learned(self.registry)

    def quarantined(self) -> list[QuarantinedLesson]:
        """The rules held back and not yet decided, oldest first, with provenance
        (``quarantine.entries()`` lists decided ones too)."""
        return lessons.held(self).entries("pending")

    def approve(self, entry_id: str) -> Lesson:
        """Compile a quarantined rule, as a lesson of the run that wrote it (so
        ``forget`` of that run and ``rollback_trajectory`` take it back), rendered
        with "approved by an operator" in its provenance. Never merged into another
        lesson: the operator approved this text. What the quarantine holds is rendered
        as every rule is (one line, quotes neutralised, at most ``max_rule_chars``):
        a quarantine file may have been edited since the rule was written."""
        return lessons.approve(self, entry_id)

    def reject(self, entry_id: str) -> QuarantinedLesson:
        """Mark a pending quarantined rule rejected (it stays listed, as a record)."""
        return lessons.reject(self, entry_id)

    def forget(self, run: Run) -> int:
        """Take back what ``run`` taught: its blocks go (``rollback_trajectory``, an
        approved rule of it too), a rule it updated gets its previous text back, its
        quarantined rules go, and entries it confirmed are pending again. Returns how
        many blocks changed."""
        return lessons.forget(self, run)


def _definition_name(d: Mapping[str, Any]) -> str:
    fn = d.get("function")
    return str(fn["name"] if isinstance(fn, Mapping) else d.get("name"))
