"""An OpenAI Agents SDK ``Session`` whose history is a :class:`rampart.Conversation`.

The SDK keeps a run's history in a session (``Runner.run(agent, input,
session=...)``): it reads the history before a run (``get_items``) and adds the run's
new items after it (``add_items``). Its own sessions hand back everything they ever
stored (openai-agents-python#177: a 400 once the history passes the window).
:class:`RampartSession` stores the items in a Conversation, an append-only log, and
hands back the history *as compiled*: instructions + tools + history fit
``context_window - reply_tokens``, old tool outputs cleared, compacted or dropped as
the :class:`rampart.ContextPolicy` says, never splitting a call from its output.

    from agents import Runner
    from rampart.integrations.openai_agents_session import RampartSession

    session = RampartSession(registry, context_window=128_000, reply_tokens=4_096)
    await Runner.run(agent, "Review the last commit", session=session)
    await Runner.run(agent, "And the one before?", session=session)

Within one run the SDK adds the run's own items to the model input without asking
the session; :meth:`RampartSession.call_model_input_filter` (pass it as
``RunConfig(call_model_input_filter=session.call_model_input_filter)``) compiles that
input too, so a single long run stays inside the window as well.

Every stub the policy clears a tool output to names a ``recall`` tool;
:meth:`RampartSession.recall_tool` is it, as an Agents SDK ``FunctionTool`` that
answers from the session's conversation (client-side, no provider support needed).
Add it to the agent beside its own tools:

    agent = Agent(name="reviewer", tools=[read_file, session.recall_tool()], model=model)

``conversation=`` continues a saved or shared conversation
(``Conversation.load``/``Conversation.open``): another worker with the same store
continues the same session. ``pop_item`` (the SDK's undo) and ``clear_session``
hide items through the log (a ``drop`` it records), so the log stays append-only and
``conversation.rollback`` can bring them back.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from rampart.conversation import ContextPolicy, Conversation, answer_recall
from rampart.conversation.recall import RECALL_TOOL, RECALL_TOOL_NAME
from rampart.errors import InvalidArgumentError
from rampart.registry import BlockRegistry
from rampart.tools.calls import repair_items

__all__ = ["RampartSession"]


class RampartSession:
    """An Agents SDK ``Session`` (its protocol: ``session_id``, ``get_items``,
    ``add_items``, ``pop_item``, ``clear_session``) over a rampart Conversation.

    ``registry``: compiled beside the history for its budget (the instructions and
    tools the agent is given; with :class:`~rampart.integrations.openai_agents.
    RampartInstructions` the same registry). ``max_tokens``: that compile's budget.
    Without ``context_window`` the history is handed back whole, as the SDK's own
    sessions do.
    """

    session_settings: Any = None

    def __init__(
        self,
        registry: BlockRegistry,
        conversation: Conversation | None = None,
        *,
        session_id: str | None = None,
        context_window: int | None = None,
        reply_tokens: int | None = None,
        policy: ContextPolicy | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not isinstance(registry, BlockRegistry):
            raise InvalidArgumentError(
                f"registry must be a BlockRegistry, got {type(registry).__name__}"
            )
        if conversation is not None and not isinstance(conversation, Conversation):
            raise InvalidArgumentError(
                f"conversation must be a rampart.Conversation, got {type(conversation).__name__}"
            )
        if policy is not None and not isinstance(policy, ContextPolicy):
            raise InvalidArgumentError(
                f"policy must be a rampart.ContextPolicy, got {type(policy).__name__}"
            )
        self.registry = registry
        self.conversation = Conversation(session_id) if conversation is None else conversation
        self.session_id = session_id or self.conversation.conversation_id or uuid.uuid4().hex
        self.context_window = context_window
        self.reply_tokens = reply_tokens
        self.policy = policy
        self.max_tokens = max_tokens
        self.last: Any = None  # the most recent compile (its message_report, messages)
        # the turn input call_model_input_filter compiled last (the run's own items,
        # which the SDK may not have added to the session yet)
        self._scratch: Conversation | None = None
        # the ids the model wrote for calls added but not answered yet -> the ids
        # they were recorded under (repair_items pairs a later output with them)
        self._waiting: dict[Any, list[str]] = {}
        self._repair_lock = threading.Lock()

    # ---- the Session protocol -----------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history as compiled, in the Responses input shape the SDK uses; the
        latest ``limit`` items when given."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgumentError(f"limit must be an int or None, got {limit!r}")
        items: list[Any] = (await asyncio.to_thread(self._compile)).messages("openai_responses")
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Append the run's new items (all or nothing: a malformed one is refused
        with an error naming it, and nothing of the call is appended)."""
        if not items:
            return
        await asyncio.to_thread(self._add, [_plain(i) for i in items])

    def _add(self, items: list[Any]) -> None:
        # The model's calls get the Agent's repair (null, empty or repeated ids,
        # names no tool can have: rampart.tools.calls.prepare), each output
        # following its own call; the pairing state moves on only once the
        # append succeeded (a refused batch changes nothing).
        with self._repair_lock:
            waiting = {k: list(v) for k, v in self._waiting.items()}
            fixed = repair_items(items, len(self.conversation), waiting)
            self.conversation.append(fixed)
            self._waiting = waiting

    async def pop_item(self) -> Any | None:
        """Hide and return the most recent item (the SDK's undo of a turn)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Hide every item shown: the next run starts from an empty history."""
        await asyncio.to_thread(self._hide, None)

    # ---- within a run ---------------------------------------------------------------------

    def call_model_input_filter(self, data: Any) -> Any:
        """An Agents SDK ``call_model_input_filter``: the model input of each turn
        (the session's history plus the run's new items) compiled into the window.

        Compiles a scratch conversation holding the session's history and the turn's
        input, so what the policy clears there is not recorded in the session (the
        session compiles its own history when it is read next)."""
        from agents.run import ModelInputData

        model_data = data.model_data
        if self.context_window is None:
            return model_data
        scratch = Conversation()
        scratch.append(repair_items([_plain(i) for i in model_data.input], 0))
        result = self.registry.compile(
            self.max_tokens,
            tools_in_prompt=False,
            conversation=scratch,
            context_window=self.context_window,
            reply_tokens=self.reply_tokens,
            policy=self.policy,
        )
        compiled: list[Any] = result.messages("openai_responses")
        self._scratch = scratch
        return ModelInputData(input=compiled, instructions=model_data.instructions)

    # ---- recall --------------------------------------------------------------------------

    def recall_tool(self) -> Any:
        """The ``recall`` tool every cleared stub names, as an Agents SDK
        ``FunctionTool`` (pass it in the agent's ``tools``). ``recall(call_id=...)``
        brings back one earlier tool output of this session as it was added,
        ``recall(query=...)`` the best lines of the outputs that answer a query
        (:func:`rampart.conversation.answer_recall`, hybrid with the registry's
        embedding model when it has one). A bad call is an ``error:`` result the
        model reads, never an exception in the run. Not strict: both arguments are
        optional."""
        try:
            import agents
        except ImportError as exc:
            raise ImportError(
                "RampartSession.recall_tool needs the OpenAI Agents SDK: "
                f'pip install "rampart-registry[agents]" ({exc})'
            ) from exc
        spec = RECALL_TOOL["function"]

        async def invoke(ctx: Any, raw: str) -> str:
            # A shared conversation syncs from its store, a query may embed: off the loop.
            return await asyncio.to_thread(self.answer_recall, raw)

        return agents.FunctionTool(
            name=RECALL_TOOL_NAME,
            description=spec["description"],
            params_json_schema=dict(spec["parameters"]),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    def answer_recall(self, arguments: Any) -> str:
        """The ``recall`` answer for ``arguments`` (a JSON string or a mapping) from
        the session's conversation; a call id the session does not hold yet is
        looked up in the run's input :meth:`call_model_input_filter` compiled last
        (within a run the SDK adds the run's items to the session later)."""
        try:
            if self.conversation.shared:
                self.conversation.sync()
            embedder = self.registry.embedding_model
            answer = answer_recall(self.conversation, arguments, embedder)
            scratch = self._scratch
            if scratch is not None and _missed(answer):
                again = answer_recall(scratch, arguments, embedder)
                if not _missed(again):
                    return again
            return answer
        except Exception as exc:  # the model reads why; the run goes on
            return f"error: {type(exc).__name__}: {exc}"

    # ---- helpers -----------------------------------------------------------------------

    def _compile(self) -> Any:
        if self.conversation.shared:
            self.conversation.sync()  # what other workers appended since
        kwargs: dict[str, Any] = {"tools_in_prompt": False, "conversation": self.conversation}
        if self.context_window is not None:
            kwargs.update(
                context_window=self.context_window,
                reply_tokens=self.reply_tokens,
                policy=self.policy,
            )
        self.last = self.registry.compile(self.max_tokens, **kwargs)
        return self.last

    def _pop(self) -> Any | None:
        conv = self.conversation
        shown = conv.to_messages("openai_responses")
        if not shown:
            return None
        self._hide(1)
        return shown[-1]

    def _hide(self, last_groups: int | None) -> None:
        """Record a drop of the shown items of the last ``last_groups`` appended
        messages (None: all of them)."""
        conv = self.conversation
        with conv._lock:
            shown = [s.item for s in conv._view.shown]
            if not shown:
                return
            if last_groups is None:
                ids = [it.id for it in shown]
            else:
                groups = sorted({it.group for it in shown})[-last_groups:]
                ids = [it.id for it in shown if it.group in groups]
            # A drop is an ordinary, undoable transformation of the log (the items stay).
            conv._commit({"op": "drop", "ids": ids, "reason": "session"})


def _missed(answer: str) -> bool:
    """A recall answer that found nothing (an error, or no match for the query)."""
    return answer.startswith(("error:", "no earlier tool result matches"))


def _plain(item: Any) -> Any:
    """An SDK item (a TypedDict, or a pydantic model from a run's output) as a dict."""
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(exclude_unset=True)
    return item
