"""What the plugin's entry point and its fixtures' work share: the defaults and
the per-session record (kept in pytest's stash). Below both, so neither imports
the other back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["DEFAULT_DIR", "DEFAULT_RATIO", "SESSION", "Session"]

DEFAULT_DIR = "__rampart__"
DEFAULT_RATIO = 1.5


@dataclass
class Session:
    """What this pytest run wrote and measured, for the terminal summary."""

    update: bool
    written: list[Path] = field(default_factory=list)
    latency: list[str] = field(default_factory=list)


SESSION = pytest.StashKey[Session]()
