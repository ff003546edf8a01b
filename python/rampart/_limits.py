"""Limits a program may raise on the module the docs name (docs/limits.md), kept
in a module of their own where the code reads them at call time.

``forward_limits("rampart.seeds", seed_checks)`` makes ``rampart.seeds.MAX_X = v``
(a limit the module re-exports) set ``seed_checks.MAX_X`` too, so the documented
place and the place read agree (``monkeypatch.setattr`` and its undo included)."""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["forward_limits"]


def forward_limits(module_name: str, limits: types.ModuleType) -> None:
    """Forward every ``MAX_*`` limit set on module ``module_name`` to ``limits``."""

    class Forwarding(types.ModuleType):
        """The module itself, its ``MAX_*`` assignments forwarded to its limits module."""

        def __setattr__(self, name: str, value: Any) -> None:
            if name.startswith("MAX_") and hasattr(limits, name):
                setattr(limits, name, value)
            super().__setattr__(name, value)

    sys.modules[module_name].__class__ = Forwarding
