"""Token counting: what a block costs against a compile budget.

The default is exact OpenAI ``cl100k_base``, counted in Rust from tables compiled
into the extension (offline from the first call); ``"o200k_base"`` (GPT-4o, GPT-4.1,
GPT-5, the o-series) is counted the same way, and :func:`encoding_for_model` names
the encoding an OpenAI model counts a request with. A registry also accepts any
``Callable[[str], int]`` or a Hugging Face ``tokenizer.json`` (needs the
``tokenizers`` package: ``pip install rampart-registry[hf]``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

import rampart._core as _core
from rampart.errors import InvalidArgumentError, ParseError

__all__ = [
    "CallableTokeniser",
    "Cl100kTokeniser",
    "HuggingFaceTokeniser",
    "O200kTokeniser",
    "Tokeniser",
    "TokeniserLike",
    "count_tokens",
    "encoding_for_model",
    "resolve_tokeniser",
    "tokeniser_for_model",
]

count_tokens = _core.count_tokens


class Tokeniser:
    """Counts tokens. ``builtin`` tokenisers are counted inside the Rust core."""

    builtin: bool = False
    name: str = "tokeniser"

    def count(self, text: str) -> int:
        """The number of tokens ``text`` costs in a prompt (no special tokens).

        Example:
            >>> rampart.tokens.Cl100kTokeniser().count("Run the tests.")
            4
        """
        raise NotImplementedError

    def count_many(self, texts: list[str]) -> list[int]:
        """``count`` of each text, in order; subclasses batch where they can."""
        return [self.count(t) for t in texts]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Cl100kTokeniser(Tokeniser):
    """Exact ``cl100k_base`` (GPT-4 / GPT-3.5) counts, in Rust."""

    builtin = True
    name = "cl100k_base"

    def count(self, text: str) -> int:
        return _core.count_tokens(text)

    def count_many(self, texts: list[str]) -> list[int]:
        return _core.count_tokens_many(texts)


class O200kTokeniser(Tokeniser):
    """Exact ``o200k_base`` (GPT-4o, GPT-4.1, GPT-5, o-series) counts, in Rust.

    Not ``builtin``: the core's registry counts blocks with cl100k_base, so a
    registry with this tokeniser hands the core its counts (still Rust's, batched).
    """

    name = "o200k_base"

    def count(self, text: str) -> int:
        return _core.count_tokens(text, "o200k_base")

    def count_many(self, texts: list[str]) -> list[int]:
        return _core.count_tokens_many(texts, "o200k_base")


class CallableTokeniser(Tokeniser):
    """Wraps any ``Callable[[str], int]``; results are checked to be ints >= 0."""

    def __init__(self, fn: Callable[[str], int]):
        self._fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def count(self, text: str) -> int:
        n = self._fn(text)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0 or n >= 2**32:
            raise InvalidArgumentError(
                f"tokeniser {self.name!r} returned {n!r} for a text; expected an int in [0, 2**32)"
            )
        return n


class HuggingFaceTokeniser(Tokeniser):
    """Counts with a Hugging Face ``tokenizer.json`` (no special tokens, no truncation)."""

    def __init__(self, source: str | os.PathLike[str] | Any):
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "a tokenizer.json tokeniser needs the 'tokenizers' package: "
                "pip install 'rampart-registry[hf]'"
            ) from exc
        if isinstance(source, Tokenizer):
            tok = source
            self.name = "tokenizers.Tokenizer"
        else:
            path = Path(source)
            if path.is_dir():
                path = path / "tokenizer.json"
            if not path.is_file():
                raise FileNotFoundError(f"no tokenizer.json at {path}")
            try:
                tok = Tokenizer.from_file(str(path))
            except Exception as exc:  # tokenizers raises a bare Exception for bad JSON
                raise ParseError(f"not a valid tokenizer.json: {exc}", path=path) from None
            self.name = str(path)
        # Counting must see the whole text: padding or truncation baked into a
        # tokenizer.json (MiniLM's pads and cuts at 128) would make costs wrong.
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encs]


TokeniserLike = Union[Tokeniser, Callable[[str], int], str, "os.PathLike[str]", None]


#: The encodings the Rust core counts (``tokeniser="o200k_base"``).
BUILTIN_ENCODINGS = ("o200k_base", "cl100k_base")


def resolve_tokeniser(spec: Any) -> Tokeniser:
    """Turn a registry's ``tokeniser=`` argument into a :class:`Tokeniser`.

    ``None`` or ``"cl100k_base"``: the built-in counter; ``"o200k_base"``: the
    built-in counter for current OpenAI models. A path to a
    ``tokenizer.json`` (or a folder holding one), or a ``tokenizers.Tokenizer``:
    Hugging Face. Any other callable: called with the text, must return an int.
    """
    if spec is None or spec == "cl100k_base":
        return _CL100K
    if spec == "o200k_base":
        return _O200K
    if isinstance(spec, Tokeniser):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        # A misspelt encoding ("o200k") would otherwise read as a missing file
        # (a bare FileNotFoundError): the argument is named, with what it takes.
        if not (path.is_file() or (path / "tokenizer.json").is_file()):
            import difflib

            close = difflib.get_close_matches(str(spec), BUILTIN_ENCODINGS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            names = ", ".join(map(repr, BUILTIN_ENCODINGS))
            raise InvalidArgumentError(
                f"tokeniser={spec!r} is no built-in encoding{hint} and no tokenizer.json "
                f"file or folder holding one: pass one of {names}, a path to a "
                "tokenizer.json, a tokenizers.Tokenizer or a callable(text) -> int"
            )
        return HuggingFaceTokeniser(spec)
    if type(spec).__module__.startswith("tokenizers"):
        return HuggingFaceTokeniser(spec)
    if callable(spec):
        return CallableTokeniser(spec)
    raise InvalidArgumentError(
        "tokeniser must be None, 'cl100k_base', 'o200k_base', a tokenizer.json path "
        f"or a callable, got {spec!r}"
    )


_CL100K = Cl100kTokeniser()
_O200K = O200kTokeniser()

# Which encoding an OpenAI model counts a request with: tiktoken's table
# (tiktoken/model.py), the models it knows and their dated snapshots. Exact names
# first, then prefixes, longest first, so "gpt-4o-mini" is not read as "gpt-4-".
# gpt-oss counts in o200k_harmony, which is o200k_base plus special tokens: the
# same counts for the text of a request.
_MODEL_ENCODING = {
    "gpt-5": "o200k_base",
    "gpt-4.5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "chatgpt-4o-latest": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4-mini": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
}
_PREFIX_ENCODING = sorted(
    {
        "gpt-5": "o200k_base",  # gpt-5, gpt-5-mini, gpt-5.1, gpt-5-codex ...
        "gpt-4.5-": "o200k_base",
        "gpt-4.1-": "o200k_base",
        "gpt-4o-": "o200k_base",
        "chatgpt-4o-": "o200k_base",
        "gpt-oss-": "o200k_base",
        "o1-": "o200k_base",
        "o3-": "o200k_base",
        "o4-mini-": "o200k_base",
        "ft:gpt-4o": "o200k_base",
        "ft:gpt-4.1": "o200k_base",
        "gpt-4-": "cl100k_base",
        "gpt-3.5-turbo-": "cl100k_base",
        "gpt-35-turbo-": "cl100k_base",
        "ft:gpt-4": "cl100k_base",
        "ft:gpt-3.5-turbo": "cl100k_base",
    }.items(),
    key=lambda kv: -len(kv[0]),
)


def encoding_for_model(model: str) -> str | None:
    """The built-in encoding ``model`` counts its input with, or None when unknown.

    OpenAI models by their API names (dated snapshots and fine-tunes included,
    a leading ``openai/`` as routers write it is ignored); None for any other
    provider's model, whose tokenizer is not public.

    Example:
        >>> rampart.tokens.encoding_for_model("gpt-4o-mini-2024-07-18")
        'o200k_base'
    """
    name = model.strip().lower().removeprefix("openai/")
    if name in _MODEL_ENCODING:
        return _MODEL_ENCODING[name]
    for prefix, encoding in _PREFIX_ENCODING:
        if name.startswith(prefix):
            return encoding
    return None


def tokeniser_for_model(model: str) -> Tokeniser | None:
    """The built-in :class:`Tokeniser` for ``model`` (see :func:`encoding_for_model`)."""
    encoding = encoding_for_model(model)
    return None if encoding is None else resolve_tokeniser(encoding)
