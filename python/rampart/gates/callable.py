"""A caller's ``gate=`` callable: ``(task_text, blocks) -> one score per block``,
checked (one number per block, NaN refused) before the core cuts by them."""

from __future__ import annotations

import rampart._args as _args
import rampart._core as _core
from rampart._view import GateFn, RegistryView
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError

__all__ = ["gate_scores"]


def gate_scores(
    reg: RegistryView,
    view: _core.OrderView,
    task_text: str | None,
    gate: GateFn,
) -> list[float]:
    """A ``gate=`` callable's scores for the blocks of ``view``, one number each."""
    if not callable(gate):
        raise InvalidArgumentError(f"gate must be a callable(task_text, blocks), got {gate!r}")
    blocks = [InstructionBlock(b) for b in view.blocks()]
    scores = list(gate(task_text or "", blocks))
    if len(scores) != len(blocks):
        raise InvalidArgumentError(f"gate returned {len(scores)} scores for {len(blocks)} blocks")
    out = []
    for b, s in zip(blocks, scores):
        if type(s) is not float or s != s:  # numpy scalars go the long way
            try:
                s = _args.number(s, "score", finite=False)
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"gate returned {s!r} for block {b!r}; expected a number"
                ) from None
        out.append(float(s))
    return out
