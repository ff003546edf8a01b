"""Argument checks shared by the public API: one place that turns a Python value
into what the core takes, or raises :class:`InvalidArgumentError` naming it.

The checks accept what ``operator.index`` (integers) and ``float()`` (numbers)
accept, so numpy scalars work like the builtins; ``bool`` is refused where a
number is meant, since ``True`` as a priority or budget is always a mistake.
"""

from __future__ import annotations

import math
import operator
import os
import re
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rampart.errors import InvalidArgumentError

__all__ = [
    "FAR",
    "MAX_INT",
    "check_budget",
    "clamped",
    "file_path",
    "int_arg",
    "is_array",
    "not_text",
    "number",
    "priority",
    "repaired",
    "tags",
    "text",
    "vector",
]

# Positions and steps clamp (docs/specification.md §3), so any Python int is valid; the core takes
# i64, and +-2**62 is already past the end of any registry.
FAR = 2**62
# Counts (budgets, top-k, n) go to the core as u64/usize; a larger one is no
# meaningful request and would overflow the conversion.
MAX_INT = 2**63 - 1


def _is_bool(value: Any) -> bool:
    # numpy's bool (numpy.bool_) is not a bool subclass but is just as much a
    # mistake here; it has __index__, so operator.index alone would take it.
    t = type(value)
    return isinstance(value, bool) or (t.__module__ == "numpy" and t.__name__ in ("bool", "bool_"))


def flag(value: Any, what: str) -> bool:
    """A bool argument (numpy's bool too); anything else InvalidArgumentError."""
    if _is_bool(value):
        return bool(value)
    raise InvalidArgumentError(f"{what} must be True or False, got {value!r}")


def _index(value: Any, what: str, wanted: str = "an int") -> int:
    """``operator.index(value)`` (int, numpy integer, anything with ``__index__``),
    bools refused; otherwise InvalidArgumentError saying ``what`` must be ``wanted``."""
    if _is_bool(value):
        raise InvalidArgumentError(f"{what} must be {wanted}, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{what} must be {wanted}, got {value!r}") from None


def int_arg(value: Any, what: str, *, minimum: int | None = None) -> int:
    """An integer (int, numpy integer, anything with ``__index__``; not bool)."""
    if type(value) is not int:
        value = _index(value, what)
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {value}")
    if value > MAX_INT:
        raise InvalidArgumentError(f"{what} must be <= 2**63 - 1, got {value}")
    return int(value)


def clamped(value: Any, what: str) -> int:
    """A position or step: any integer, clamped to +-2**62."""
    return max(-FAR, min(FAR, _index(value, what)))


def number(value: Any, what: str, *, finite: bool = True) -> float:
    """A real number (int, float, numpy scalar, anything ``float()`` takes that is
    not a string or bool). NaN is refused always: it compares false with
    everything, so a NaN threshold silently gates out every block; infinities
    only when ``finite`` is False."""
    if _is_bool(value) or isinstance(value, (str, bytes, bytearray)):
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}") from None
    if math.isnan(f) or (finite and math.isinf(f)):
        raise InvalidArgumentError(f"{what} must be a finite number, got {value!r}")
    return f


def check_budget(budget: Any) -> int:
    """A token budget: an int in [0, 2**63 - 1]."""
    b = _index(budget, "max_tokens", "an int >= 0")
    if b < 0 or b > MAX_INT:
        raise InvalidArgumentError(f"max_tokens must be an int in [0, 2**63 - 1], got {budget!r}")
    return int(b)


def priority(value: Any) -> float:
    """A priority in [0, 1]."""
    if _is_bool(value) or isinstance(value, (str, bytes, bytearray)):
        raise InvalidArgumentError(f"priority must be a number in [0, 1], got {value!r}")
    try:
        p = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"priority must be a number in [0, 1], got {value!r}") from None
    if not 0.0 <= p <= 1.0:  # also false for NaN
        raise InvalidArgumentError(f"priority must be a number in [0, 1], got {value!r}")
    return p


def tags(value: Iterable[str] | None) -> list[str]:
    """A list of tag strings (a lone string is refused: it would be split into letters)."""
    if value is None:
        return []
    if isinstance(value, str):
        raise InvalidArgumentError(f"tags must be a list of strings, not the string {value!r}")
    try:
        out = list(value)
    except TypeError:
        raise InvalidArgumentError(f"tags must be a list of strings, got {value!r}") from None
    if not all(isinstance(t, str) for t in out):
        raise InvalidArgumentError(f"tags must be strings, got {out!r}")
    return out


def text(value: Any, what: str) -> str:
    """A str that is text: refuses bytes, everything else, and strings holding a
    lone surrogate (``"\\ud800"``, e.g. from a JSON escape in model output), which
    no file, store or tokeniser can hold."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(value).__name__}")
    if not value.isascii():  # O(1) for ASCII text: CPython records it
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{what} holds a lone surrogate {value[exc.start]!r} at index {exc.start}, "
                "which is not text"
            ) from None
    return value


# A UTF-16 surrogate alone: what JSON's "\ud800" escape decodes to. Not text.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def repaired(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD: the rule for text a
    *model* wrote (tool-call arguments, a recall query), which is taken as
    written, where a caller's argument is refused (:func:`text`). O(1) for ASCII."""
    return value if value.isascii() else _LONE_SURROGATE.sub("\ufffd", value)


def file_path(value: Any, what: str = "path") -> Path:
    """A file name the operating system can take: a ``str``, ``bytes`` or
    ``os.PathLike``. A name holding a lone surrogate other than the ones
    ``os.fsdecode`` itself makes for undecodable bytes (U+DC80-U+DCFF, which
    encode back to those bytes), or a NUL, is refused here, naming ``what``:
    it is checked before anything is read or written, so a refused save
    writes nothing (a bare ``UnicodeEncodeError`` from ``open`` before)."""
    try:
        raw = os.fspath(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be a str or os.PathLike, got {type(value).__name__}"
        ) from None
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    if "\0" in raw:
        raise InvalidArgumentError(f"{what} {raw!r} holds a NUL character")
    if not raw.isascii():
        try:
            os.fsencode(raw)
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{what} {raw!r} holds {raw[exc.start]!r} at index {exc.start}, which no "
                "file name can hold"
            ) from None
    return Path(raw)


def not_text(exc: Exception, **values: Any) -> InvalidArgumentError:
    """The InvalidArgumentError for a UnicodeEncodeError (or TypeError) the core
    raised while taking string arguments: names the first of ``values`` that is
    not text (``documents[3]`` for the fourth string of a list)."""
    for what, value in values.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [(f"{what}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(what, value)]
        for name, v in items:
            try:
                text(v, name)
            except InvalidArgumentError as err:
                return err
    return InvalidArgumentError(f"an argument is not text: {exc}")


def is_array(value: Any) -> bool:
    return hasattr(value, "__array__") and hasattr(value, "shape")


def vector(value: Any, what: str) -> bytes:
    """One vector as native float32 bytes, the form the core stores and scores.
    Accepts a numpy array or any sequence of numbers (numpy is not required)."""
    if is_array(value):
        import numpy as np

        try:
            arr = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{what} must be an array of numbers") from None
        if arr.ndim != 1 or arr.size == 0:
            raise InvalidArgumentError(
                f"{what} must be a non-empty 1-d vector, got shape {tuple(arr.shape)}"
            )
        if not np.isfinite(arr).all():
            raise InvalidArgumentError(f"{what} holds NaN or infinite values")
        return np.ascontiguousarray(arr).tobytes()
    if isinstance(value, (str, bytes)):
        raise InvalidArgumentError(f"{what} must be a sequence of numbers, got {value!r}")
    try:
        vec = [float(x) for x in value]
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"{what} must be a sequence of numbers") from None
    # float32 overflows to inf above ~3.4e38: check after the narrowing.
    packed = array("f", vec) if vec else None
    if packed is None or not all(math.isfinite(x) for x in packed):
        raise InvalidArgumentError(f"{what} must be a non-empty sequence of finite numbers")
    return packed.tobytes()
