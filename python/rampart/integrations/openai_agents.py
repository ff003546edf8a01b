"""The OpenAI Agents SDK with a rampart registry: compiled instructions, gated tools.

An Agents SDK ``Agent`` takes ``instructions`` as a string or as a callable run
before every model call, and each ``FunctionTool`` an ``is_enabled`` callable
asked at the same moment. :class:`RampartInstructions` is both: each model turn it
compiles the registry for the run's task once (gate, order, budget) and

* returns the compiled prompt as the agent's instructions;
* enables only the function tools whose tool blocks the gate kept, so the model
  sees the tools the task needs as native ``tools``, never as prompt text.

The task comes from the run's context: ``Runner.run(agent, task, context=task)``
(a ``str``), any object with a ``task`` attribute (:class:`RampartTask`) or a
mapping with a ``"task"`` key; or pass ``task=`` a function of the context.

    from agents import Runner
    from rampart.integrations.openai_agents import RampartInstructions, RampartTask

    rampart = RampartInstructions(registry, top_k=6, max_tokens=2000)
    agent = rampart.agent("assistant", tools=[read_file, run_tests], model=model)
    await Runner.run(agent, question, context=RampartTask(question))

Tools and instruction blocks compete in one gate, as in the paper: ``top_k``
counts both. Hosted tools (web search, file search…) have no schema to gate and
are passed through unchanged.

When it gates, :meth:`RampartInstructions.agent` also gives the agent a
``find_tools(query)`` tool (:meth:`RampartInstructions.find_tools_tool`): the model
can ask for a tool the gate hid, by exact name or by what it does
(:func:`rampart.agent.search_tools`), and the tools found are enabled for the rest of
that run, from its next model call on.
"""

from __future__ import annotations

import copy
import inspect
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import rampart._http as _http
from rampart.block import CompileResult
from rampart.errors import InvalidArgumentError
from rampart.registry import BlockRegistry
from rampart.tool_search import TOOL_SEARCH, TOOL_SEARCH_TOOL, search_tools

if TYPE_CHECKING:
    from agents import Agent, RunContextWrapper

__all__ = ["RampartInstructions", "RampartTask"]

# Compiles kept per (run, turn); runs that ended are dropped past this many.
_KEEP = 64


@dataclass
class RampartTask:
    """A run context that carries the task the registry is gated on. ``last`` is
    the most recent compile of the run (for logging or inspection)."""

    task: str
    last: CompileResult | None = None


def _require_agents() -> Any:
    try:
        import agents
    except ImportError as exc:
        raise ImportError(
            "rampart.integrations.openai_agents needs the OpenAI Agents SDK: "
            f'pip install "rampart-registry[agents]" ({exc})'
        ) from exc
    return agents


def task_of(context: Any) -> str:
    """The task text a run context carries (a str, ``.task`` or ``["task"]``)."""
    if isinstance(context, str):
        return context
    value = context.get("task") if isinstance(context, Mapping) else getattr(context, "task", None)
    if isinstance(value, str):
        return value
    raise InvalidArgumentError(
        "rampart needs the run's task to gate on: pass context=<task str>, "
        f"context=RampartTask(task) or an object with a .task str to Runner.run; got {context!r}"
    )


class RampartInstructions:
    """Dynamic ``instructions`` for an Agents SDK ``Agent``, and the gate for its tools.

    ``max_tokens``, ``top_k`` and ``threshold`` are the compile's budget and gate
    (see :meth:`BlockRegistry.compile`); without ``top_k``/``threshold`` nothing is
    gated and every tool stays enabled. ``preamble`` goes before the compiled
    blocks (a role line, say). ``task`` maps a run context to the task text when
    the default reading (:func:`task_of`) does not fit. ``tool_search``: add the
    ``find_tools`` fallback in :meth:`agent` (default: when it gates).
    ``tools="all"`` keeps every function tool enabled whatever the gate says (the
    request's ``tools`` array then stays the same from task to task, so OpenAI's
    prompt cache survives a new task; the gate still shapes the instructions);
    ``"gated"`` (the default) enables a tool only in turns whose compile keeps it.
    """

    def __init__(
        self,
        registry: BlockRegistry,
        *,
        max_tokens: int | None = None,
        top_k: int | None = None,
        threshold: float | None = None,
        preamble: str = "",
        task: Callable[[Any], str] | None = None,
        tool_search: bool | None = None,
        tools: str = "gated",
    ) -> None:
        if not isinstance(registry, BlockRegistry):
            raise InvalidArgumentError(
                f"RampartInstructions needs a BlockRegistry, got {type(registry).__name__}"
            )
        if tools not in ("gated", "all"):
            raise InvalidArgumentError(
                f"tools must be 'gated' or 'all', got {tools!r} (the Agents SDK has no "
                "per-turn allowed_tools tool choice)"
            )
        self.tools = tools
        self.registry = registry
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.threshold = threshold
        self.preamble = preamble
        self._task = task or task_of
        self._lock = threading.Lock()
        # (id(run), task, model requests so far) -> (run, compile). The run itself is
        # kept so that its id cannot be reused by a later run while the entry lives.
        self._compiled: dict[tuple[int, str, int], tuple[Any, CompileResult]] = {}
        if tool_search is not None and not isinstance(tool_search, bool):
            raise InvalidArgumentError(f"tool_search must be a bool or None, got {tool_search!r}")
        self.tool_search = self.gated if tool_search is None else tool_search
        self._gated_names: set[str] = set()  # the function tools gate() was given
        # id(run's Usage) -> (that Usage, tools find_tools turned up in the run). The
        # Usage object is shared by a run's context wrapper and its tool contexts.
        self._found: dict[int, tuple[Any, set[str]]] = {}

    @property
    def gated(self) -> bool:
        return self.top_k is not None or self.threshold is not None

    # ---- one compile per model turn -------------------------------------------------

    def compile(self, ctx: RunContextWrapper[Any]) -> CompileResult:
        """This turn's compile for the run ``ctx`` (instructions and tool gate share
        it: the SDK asks for both before each model call)."""
        task = self._task(ctx.context)
        if not isinstance(task, str):
            raise InvalidArgumentError(f"task function returned {type(task).__name__}, not str")
        key = (id(ctx), task, ctx.usage.requests)
        with self._lock:
            hit = self._compiled.get(key)
        if hit is not None and hit[0] is ctx:
            return hit[1]
        result = self.registry.compile(
            max_tokens=self.max_tokens,
            task_text=task if self.gated else None,
            relevance_threshold=self.threshold,
            top_k=self.top_k,
            tools_in_prompt=False,
        )
        with self._lock:
            if len(self._compiled) >= _KEEP:
                self._compiled.clear()
            self._compiled[key] = (ctx, result)
        if isinstance(ctx.context, RampartTask):
            ctx.context.last = result
        return result

    def __call__(self, ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        """The instructions callable: the compiled prompt for this turn."""
        prompt = self.compile(ctx).prompt
        return (
            f"{self.preamble}\n\n{prompt}" if self.preamble and prompt else self.preamble or prompt
        )

    # ---- tools ----------------------------------------------------------------------

    def gate(self, tools: Iterable[Any]) -> list[Any]:
        """``tools`` with each function tool gated by the registry: its schema is
        loaded as a tool block (once per name), and a copy of the tool is enabled
        only in turns whose compile keeps that block. Other tools pass unchanged."""
        agents = _require_agents()
        tools = list(tools)
        function_tools = [t for t in tools if isinstance(t, agents.FunctionTool)]
        self._gated_names.update(t.name for t in function_tools)
        loaded = {s.name for b in self.registry.list_blocks() if (s := b.tool_schema)}
        new = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description or "",
                "parameters": t.params_json_schema,
            }
            for t in function_tools
            if t.name not in loaded
        ]
        if new:
            self.registry.load_tools(new)
        return [self._gated(t) if isinstance(t, agents.FunctionTool) else t for t in tools]

    def _gated(self, tool: Any) -> Any:
        before = tool.is_enabled
        name = tool.name

        async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            if before is False:
                return False
            if callable(before):
                allowed = before(ctx, agent)
                if inspect.isawaitable(allowed):
                    allowed = await allowed
                if not allowed:
                    return False
            if not self.gated or self.tools == "all" or name in self._found_in(ctx):
                return True
            return any(t["function"]["name"] == name for t in self.compile(ctx).tools("openai"))

        gated = copy.copy(tool)
        gated.is_enabled = is_enabled
        return gated

    def _found_in(self, ctx: Any) -> set[str]:
        usage = getattr(ctx, "usage", None)
        with self._lock:
            hit = self._found.get(id(usage))
        return hit[1] if hit is not None and hit[0] is usage else set()

    def find_tools_tool(self) -> Any:
        """The ``find_tools(query)`` function tool: searches the tools given to
        :meth:`gate` (exact name first, then the registry's relevance ranking) and
        enables what it finds for the rest of the calling run."""
        agents = _require_agents()
        spec = TOOL_SEARCH_TOOL["function"]

        async def invoke(ctx: Any, raw: str) -> str:
            try:
                args = _http.loads_text(raw) if raw and raw.strip() else {}
            except ValueError:
                return f"error: the arguments of {TOOL_SEARCH} are not JSON: {raw:.200}"
            query = args.get("query") if isinstance(args, dict) else None
            if not isinstance(query, str) or not query.strip():
                return f"error: {TOOL_SEARCH} needs a non-empty 'query'"
            found = search_tools(self.registry, query, allowed=self._gated_names)
            usage = ctx.usage
            with self._lock:
                hit = self._found.get(id(usage))
                if hit is None or hit[0] is not usage:
                    if len(self._found) >= _KEEP:
                        self._found.clear()
                    hit = self._found[id(usage)] = (usage, set())
                hit[1].update(schema.name for schema, _, _ in found)
            if not found:
                return f"no tool matches {query[:200]!r}"
            out = [
                {"name": s.name, "description": s.description[:300], "matched_by": how}
                for s, how, _ in found
            ]
            return json.dumps({"found": out, "note": "these tools are offered from your next step"})

        params = {**spec["parameters"], "additionalProperties": False}
        return agents.FunctionTool(
            name=TOOL_SEARCH,
            description=spec["description"],
            params_json_schema=params,
            on_invoke_tool=invoke,
        )

    def agent(self, name: str, *, tools: Iterable[Any] = (), **kwargs: Any) -> Agent[Any]:
        """An ``Agent`` whose instructions are this object and whose function tools
        are gated, with ``find_tools`` beside them when ``tool_search`` is on
        (``kwargs`` go to ``Agent``: model, handoffs, output_type…)."""
        agents = _require_agents()
        if "instructions" in kwargs:
            raise InvalidArgumentError(
                "the instructions come from the registry; drop instructions="
            )
        gated = self.gate(tools)
        if self.tool_search:
            if any(getattr(t, "name", None) == TOOL_SEARCH for t in gated):
                raise InvalidArgumentError(
                    f"a tool named {TOOL_SEARCH!r} clashes with the gate's fallback tool: "
                    "rename it, or pass tool_search=False"
                )
            gated.append(self.find_tools_tool())
        agent: Agent[Any] = agents.Agent(name=name, instructions=self, tools=gated, **kwargs)
        return agent
