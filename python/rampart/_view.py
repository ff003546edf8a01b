"""The view of a registry that components receive (docs/design.md, House rules, "Components take a
view, not the façade").

A gate, a cache session, a replica or the asyncio helpers get a registry typed
as :class:`RegistryView`: the members they use, and nothing that would make them
import :class:`~rampart.registry.BlockRegistry` back (imports point one way,
down). ``BlockRegistry`` implements it; the protocol is runtime-checkable, so a
component that is handed something else says so at construction.

The underscored members are the registry's slots a component owns or reads:
the gate policy (``_gate``: query cache, adapter, example state; written only
by :mod:`rampart.gates`), the model (``_embedder``, ``_model()``), the shared
replica (``_replica``, written by :mod:`rampart.shared`) and the embedding lock.
They stay on the registry (one object per registry, forked with it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rampart.errors import InvalidArgumentError

if TYPE_CHECKING:
    import rampart._core as _core
    from rampart.block import CompileResult, InstructionBlock

__all__ = ["DEFAULT_SEPARATOR", "GateFn", "RegistryView", "check_view"]

#: What ``compile`` puts between two blocks unless told otherwise.
DEFAULT_SEPARATOR = "\n\n---\n\n"

#: A ``gate=`` callable: ``(task_text, blocks) -> one score per block``.
GateFn = Callable[[str, Sequence["InstructionBlock"]], Sequence[float]]


@runtime_checkable
class RegistryView(Protocol):
    """What components may use of a registry."""

    # the gate policy (rampart.gates.policy.GatePolicy): query cache, adapter, examples
    _gate: Any
    # the model
    _embedder: Any
    _embed_lock: threading.Lock
    # the shared replica (rampart.shared.replica), None for a local registry
    _replica: Any
    # token counting and the budget (rampart.gates: the separator's count is cached)
    _tok: Any
    _sep_cache: dict[str, int]
    default_max_tokens: int | None

    @property
    def label(self) -> str: ...
    @property
    def registry_id(self) -> str: ...
    @property
    def _core(self) -> _core.Registry: ...
    def _model(self) -> Any: ...
    def _settings(self) -> str: ...
    def _embed_written(self) -> None: ...
    def embed_pending(self) -> int: ...
    def count_tokens(self, text: str) -> int: ...
    def __contains__(self, runtime_id: object) -> bool: ...
    def get_by_id(self, runtime_id: str) -> InstructionBlock: ...
    def write_block(self, content: str, semantic_name: str, *args: Any, **kwargs: Any) -> str: ...
    def find_relevant(
        self, task_text: str | None, *args: Any, **kwargs: Any
    ) -> list[tuple[InstructionBlock, float]]: ...
    def compile(self, *args: Any, **kwargs: Any) -> CompileResult: ...
    async def acompile(self, *args: Any, **kwargs: Any) -> CompileResult: ...


def check_view(registry: Any, who: str) -> RegistryView:
    """``registry`` if it is a registry (a :class:`RegistryView`); else
    InvalidArgumentError saying ``who`` needs one."""
    if not isinstance(registry, RegistryView):
        raise InvalidArgumentError(f"{who} needs a BlockRegistry, got {registry!r:.80}")
    return registry
