from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import rampart

ROOT = Path(__file__).resolve().parent.parent


def _shared() -> Path:
    env = os.environ.get("RAMPART_SHARED")
    if env:
        return Path(env)
    # CI clones beside shared/, a developer's checkout sits next to it too.
    for base in (ROOT, *ROOT.parents):
        cand = base / "shared"
        if (cand / "data" / "skills").is_dir():
            return cand
    return ROOT.parent / "shared"


SHARED = _shared()
SKILLS = SHARED / "data" / "skills"
SEEDS = ROOT / "seeds"


def words(text: str) -> int:
    """A predictable tokeniser for budget tests: one token per word."""
    return len(text.split())


@pytest.fixture
def reg() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    yield r
    r.release()


def add(r: rampart.BlockRegistry, name: str, n_words: int, **kw: object) -> str:
    """Write an agent block of exactly ``n_words`` word-tokens."""
    content = " ".join(f"{name}{i}" for i in range(n_words))
    return r.write_block(content, name, **kw)  # type: ignore[arg-type]
