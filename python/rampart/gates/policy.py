"""The gate policy a registry owns (``reg._gate``): the task-vector cache, the
cold gate's query adapter, the tool-example state and the choice between the
gates, in one object per registry.

Every gate module reads and writes gate state here and nowhere else: the
registry holds one slot for it, and components reach it through their
:class:`~rampart._view.RegistryView` (``view._gate``), never through the
registry class. Not pickled or journaled: a copy or a replica builds its own,
from its blocks, on first use.
"""

from __future__ import annotations

from typing import Any

import rampart._args as _args
from rampart._ops import Encode, Steps, drive
from rampart._view import RegistryView

__all__ = ["QUERY_CACHE", "GatePolicy"]

#: Task texts whose vectors (plain and adapter-mapped) a registry keeps.
QUERY_CACHE = 64


class GatePolicy:
    """One registry's gate state and the choice of gate for a task.

    ``examples``: whether some tool block has example requests (None: not
    looked for yet); ``example_gate``: the :class:`~rampart.gates.examples.ExampleGate`
    once built; ``adapter``: the cold gate's query adapter (None: not looked for
    yet, False: none, "off": turned off, or one); ``queries``: task vectors by
    (model or adapter, task text).
    """

    __slots__ = ("adapter", "example_gate", "examples", "queries")

    def __init__(self) -> None:
        self.queries: dict[tuple[int, str], bytes] = {}
        self.examples: bool | None = None
        self.example_gate: Any = None
        self.adapter: Any = None

    # ---- the task's vector ---------------------------------------------------------

    def query_steps(
        self, reg: RegistryView, task_text: str | None, task_embedding: Any
    ) -> Steps[bytes]:
        """The task's vector (the model's, or ``task_embedding``), cached per model and task."""
        if task_embedding is not None:
            return _args.vector(task_embedding, "task_embedding")
        model = reg._model()
        text = _args.text(task_text, "task_text")
        # Agents compile for the same task before every model call: its vector is
        # kept (per model, a few dozen tasks) instead of running the model again.
        key = (id(model), text)
        q = self.queries.get(key)
        if q is None:
            q = _args.vector((yield Encode(model, text)), "query embedding")
            self._keep(key, q)
        return q

    def query(self, reg: RegistryView, task_text: str) -> bytes:
        """:meth:`query_steps` driven in the calling thread (the example gate's use)."""
        out: bytes = drive(reg, self.query_steps(reg, task_text, None))
        return out

    def gate_query_steps(
        self, reg: RegistryView, task_text: str | None, task_embedding: Any
    ) -> Steps[bytes]:
        """The vector the cosine gate scores with: the task's, mapped by the
        query adapter when the registry has one (docs/tool-gate.md)."""
        q = yield from self.query_steps(reg, task_text, task_embedding)
        return self.adapt(reg, task_text, task_embedding, q)

    def adapt(
        self, reg: RegistryView, task_text: str | None, task_embedding: Any, q: bytes
    ) -> bytes:
        """``q`` mapped by the registry's query adapter (``q`` itself without one)."""
        if task_embedding is not None or self.adapter is False or task_text is None:
            return q  # a caller's own vector may come from any model: never mapped
        import rampart.gates.adapter as adapter_mod

        adapter = adapter_mod.query_adapter(reg)
        if adapter is None:
            return q
        # Kept beside the plain vector (the example gate reads that one), keyed by
        # the adapter object: a repeated task pays a dict lookup, not the matvec.
        key = (id(adapter), task_text)
        mapped = self.queries.get(key)
        if mapped is None:
            mapped = adapter.map(q)
            self._keep(key, mapped)
        return mapped

    def _keep(self, key: tuple[int, str], q: bytes) -> None:
        if len(self.queries) >= QUERY_CACHE:
            self.queries.clear()
        self.queries[key] = q

    # ---- events from the registry --------------------------------------------------

    def model_changed(self) -> None:
        """The registry's embedding model was swapped: cached vectors are another model's."""
        self.queries.clear()

    def adapter_changed(self, adapter: Any) -> None:
        """A query adapter was set (or turned off, ``"off"``) for this registry."""
        self.adapter = adapter
        self.queries.clear()
        if self.example_gate is not None:
            self.example_gate._layout = None  # its per-task scores used the old mapping

    def examples_arrived(self) -> None:
        """Example requests arrived: the next gated compile uses the example gate."""
        self.examples = True
        if self.example_gate is not None:
            self.example_gate._layout = None

    def blocks_arrived(self, reg: RegistryView, runtime_ids: list[str]) -> None:
        """A shared replica applied entries that wrote these blocks (under the
        replica's lock). A registry that found no tool examples looks at just
        these: an example another replica wrote switches it to the example gate,
        as its own write would."""
        if self.examples is not False:
            return
        import rampart.gates.examples as examples

        if examples.has_examples(reg, runtime_ids):
            self.examples_arrived()

    def tools_loaded(self, reg: RegistryView, runtime_ids: list[str]) -> None:
        """``load_tools`` wrote these blocks (run by the sync and the async driver)."""
        import rampart.gates.examples as examples

        if examples.has_examples(reg, runtime_ids):
            self.examples_arrived()
        if self.adapter is False:
            self.adapter = None  # tools arrived: look for the adapter again

    # ---- the choice ----------------------------------------------------------------

    def may_use_examples(
        self, reg: RegistryView, task_text: str | None, task_embedding: Any
    ) -> bool:
        """Whether a gated call may go to the example gate (not known to be
        absent): it runs the model and numpy, so the a-methods run it off the
        loop. One attribute read for registries without examples."""
        if task_text is None or task_embedding is not None:
            return False
        return self.has_examples(reg)

    def has_examples(self, reg: RegistryView) -> bool:
        """Whether some tool block of the registry has example requests: looked up
        once per registry object, then kept up to date by the events above."""
        if self.examples is None:
            import rampart.gates.examples as examples

            self.examples = examples.has_examples(reg)
        return self.examples

    def example_gate_for(
        self, reg: RegistryView, task_text: str | None, task_embedding: Any
    ) -> Any:
        """The example gate for a task (None: the registry has none, or the caller
        passed its own vector, which the example gate cannot use)."""
        if self.examples is False or task_text is None or task_embedding is not None:
            return None
        import rampart.gates.examples as examples

        return examples.default_gate(reg)
