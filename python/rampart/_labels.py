"""Registry labels: process-unique human names, held weakly (a label never keeps
its registry alive), and the one id -> label table (the core's), which error
messages and provenance reports both read."""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any

import rampart._args as _args
import rampart._core as _core
from rampart.errors import InvalidArgumentError

__all__ = ["claim_label", "get_by_label", "label_of", "release_label"]

_LABELS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_LABELS_LOCK = threading.Lock()
_LABEL_COUNTER = itertools.count(1)


def claim_label(label: str | None, reg: Any) -> str:
    with _LABELS_LOCK:
        if label is None:
            while True:
                label = f"registry-{next(_LABEL_COUNTER)}"
                if label not in _LABELS:
                    break
        elif not isinstance(label, str) or not label:
            raise InvalidArgumentError(f"label must be a non-empty string, got {label!r}")
        _args.text(label, "label")
        holder = _LABELS.get(label)
        if holder is not None:
            raise InvalidArgumentError(
                f"label {label!r} is already held by registry {holder.registry_id}; "
                "call release() on it or pick another label"
            )
        _LABELS[label] = reg
        return label


def get_by_label(label: str) -> Any:
    """The live registry holding ``label``, or None. Labels do not keep registries alive."""
    with _LABELS_LOCK:
        return _LABELS.get(label)


def release_label(label: str, reg: Any) -> None:
    """Free ``label`` if ``reg`` holds it (another registry may then claim it)."""
    with _LABELS_LOCK:
        if _LABELS.get(label) is reg:
            del _LABELS[label]


def label_of(registry_id: str) -> str | None:
    # The core's id -> label table: the one error messages read too (it also
    # knows the authors a loaded file named).
    return _core.label_of(registry_id)
