"""The core's cosine gate: the task's vector (cached per model and task, mapped
by the registry's query adapter when it has one) scored against every block's
stored vector by the Rust core; :class:`DenseGate` offers those scores as a
``gate=`` callable to build on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rampart._ops import EMBED_PENDING, Steps
from rampart._view import RegistryView, check_view
from rampart.block import InstructionBlock
from rampart.errors import RampartError

__all__ = ["DenseGate", "vector_steps"]


def vector_steps(reg: RegistryView, run: Callable[[], Any]) -> Steps[Any]:
    """Run a cosine-gate call, embedding blocks written meanwhile until it
    finds every block with a vector (it returns None otherwise)."""
    for _ in range(100):
        if reg._core.unembedded():  # one comparison while nothing changed
            yield EMBED_PENDING
        out = run()
        if out is not None:
            return out
    raise RampartError(
        f"registry {reg.label!r}: blocks kept arriving faster than they could be embedded"
    )


class DenseGate:
    """The registry's cosine scores as a gate callable (blocks it has no vector for
    yet are embedded first, as the built-in gate does; the task mapped by the
    registry's :func:`query_adapter` when it has one, as the built-in gate is)."""

    def __init__(self, registry: RegistryView) -> None:
        self.registry = check_view(registry, "DenseGate")

    def __call__(self, task_text: str, blocks: Sequence[InstructionBlock]) -> list[float]:
        ranked = self.registry.find_relevant(task_text)
        by_id = {b.runtime_id: float(s) for b, s in ranked}
        return [by_id.get(b.runtime_id, -1.0) for b in blocks]
