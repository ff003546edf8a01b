"""Chat backends shared by the agent loop and the probes.

- :class:`OpenAIBackend`: any OpenAI-compatible ``/chat/completions`` endpoint over
  HTTP (llama.cpp's server, Ollama, vLLM, hosted APIs). Standard library only: idle
  keep-alive connections are reused, so a call costs one request, not a TCP
  handshake.
- :class:`LlamaCppBackend`: llama-cpp-python in this process. Calls are serialised
  (one context); consecutive prompts that share a prefix reuse its KV cache, which
  is what makes a position sweep or an agent's growing conversation affordable on
  two CPU cores.

Both take native ``tools`` (OpenAI Chat Completions shape) and return the tool calls
the model made as :class:`ToolCall` objects (``Reply.calls``). A backend raises
:class:`BackendError` for a failed call; ``retryable`` says whether the caller should
try again (timeouts, 5xx, 429, malformed bodies) or record the failure at once (a 4xx
that will not change).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from rampart.errors import InvalidArgumentError, RampartError

__all__ = [
    "Backend",
    "BackendError",
    "LlamaCppBackend",
    "Message",
    "OpenAIBackend",
    "Reply",
    "ToolCall",
    "parse_completion",
    "parse_text_tool_calls",
]

#: A chat message: ``role`` and ``content``, plus ``tool_calls`` (assistant) or
#: ``tool_call_id`` (tool) when tools are in play.
Message = Mapping[str, Any]


class BackendError(RampartError):
    """A chat call failed; ``retryable`` tells the caller whether to try again."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a reply. ``arguments`` is the JSON text the model wrote (it
    may be malformed: the caller decides what to do with it)."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        """The call as an entry of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Reply:
    """One model answer: its text, the tools it called and the server's token counts.

    ``tool_calls`` holds the called tools' names (what the probes judge); ``calls``
    the full calls with ids and arguments (what an agent executes)."""

    text: str
    tool_calls: tuple[str, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    calls: tuple[ToolCall, ...] = ()

    def assistant_message(self) -> dict[str, Any]:
        """The reply as the assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.calls:
            msg["tool_calls"] = [c.to_message() for c in self.calls]
        return msg


class Backend(Protocol):
    """What the agent loop and the probe runner need from a model."""

    @property
    def model(self) -> str: ...

    @property
    def max_concurrency(self) -> int: ...

    def describe(self) -> dict[str, Any]:
        """What runs: backend kind, model and where (recorded with every result)."""
        ...

    def close(self) -> None:
        """Release the model or the connection; the backend is not used after."""
        ...

    def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float,
        seed: int,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply:
        """One chat completion of ``messages`` (with ``tools`` offered natively where
        given): the reply's text, tool calls and token counts."""
        ...


def _arguments_text(raw: Any) -> str:
    # Servers send arguments as a JSON string; a few send the object itself.
    if isinstance(raw, str):
        return raw
    if raw is None:
        return "{}"
    return json.dumps(raw)


def parse_completion(body: Any) -> Reply:
    """Read an OpenAI chat-completion body; anything else is a retryable BackendError
    (a small model behind a flaky proxy sometimes returns half a body)."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise TypeError("content is not a string")
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or f"call_{i}"),
                name=str(c["function"]["name"]),
                arguments=_arguments_text(c["function"].get("arguments")),
            )
            for i, c in enumerate(message.get("tool_calls") or [])
            if c
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        snippet = json.dumps(body)[:200] if not isinstance(body, str) else body[:200]
        raise BackendError(
            f"malformed chat completion ({type(exc).__name__}: {exc}): {snippet}", retryable=True
        ) from None
    usage = body.get("usage") if isinstance(body, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    return Reply(
        text=text,
        tool_calls=tuple(c.name for c in calls),
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
        calls=calls,
    )


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# Hermes-style tool calls, which Qwen2.5's own chat template asks the model to write:
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _call_object(obj: Any, known: Sequence[str]) -> ToolCall | None:
    if not isinstance(obj, dict) or obj.get("name") not in known:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return ToolCall(
        id=f"call_{uuid.uuid4().hex[:12]}", name=str(obj["name"]), arguments=_arguments_text(args)
    )


_FENCED_JSON = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def parse_text_tool_calls(text: str, known: Sequence[str]) -> tuple[str, tuple[ToolCall, ...]]:
    """Tool calls a model wrote as text: in its chat template's syntax
    (``<tool_call>{"name", "arguments"}</tool_call>``, what Qwen2.5's template asks
    for), or, when that is the whole reply, as one bare or fenced JSON object
    ``{"name", "arguments"}`` (what Qwen2.5-Coder-1.5B often writes instead). Returns
    the text without them, and the calls. Only names in ``known`` count, so prose that
    happens to hold the tag does not become a call; a body that is not JSON is left in
    the text."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            call = _call_object(json.loads(m.group(1)), known)
        except ValueError:
            continue
        if call is None:
            continue
        kept.append(text[last : m.start()])
        last = m.end()
        calls.append(call)
    kept.append(text[last:])
    if not calls:
        fenced = _FENCED_JSON.match(text)
        body = fenced.group(1) if fenced else text
        try:
            call = _call_object(json.loads(body), known)
        except ValueError:
            call = None
        if call is not None:
            return "", (call,)
    return "".join(kept).strip(), tuple(calls)


class OpenAIBackend:
    """An OpenAI-compatible chat endpoint, e.g. ``http://127.0.0.1:8080/v1``.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (local servers ignore it).
    ``native_tools`` sends tool schemas in the request's ``tools`` field; turn it off
    for servers or chat templates without tool support (the probes do, and render the
    schemas into the prompt instead). ``tool_choice`` is sent with the tools:
    llama.cpp-python's function-calling chat format drops the tools unless it is
    ``"auto"``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        concurrency: int = 4,
        native_tools: bool = True,
        tool_choice: str | None = "auto",
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgumentError(
                f"base_url {base_url!r}: expected http(s)://host[:port]/path, "
                "e.g. http://127.0.0.1:8080/v1"
            )
        if concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
        if timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive, got {timeout}")
        self._base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/") + "/chat/completions"
        self._model = model
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._timeout = timeout
        self._concurrency = concurrency
        self._native_tools = native_tools
        self._tool_choice = tool_choice
        # Idle keep-alive connections, shared by whichever worker calls next.
        self._idle: list[http.client.HTTPConnection] = []
        self._pool_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def max_concurrency(self) -> int:
        return self._concurrency

    @property
    def native_tools(self) -> bool:
        return self._native_tools

    def describe(self) -> dict[str, Any]:
        return {"backend": "openai", "base_url": self._base_url, "model": self._model}

    def _connection(self) -> http.client.HTTPConnection:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout)

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._pool_lock:
            self._idle.append(conn)

    def close(self) -> None:
        """Close the idle keep-alive connections (calls after this open new ones)."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float,
        seed: int,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply:
        payload: dict[str, Any] = {
            "model": self._model,
            "messages": [dict(m) for m in messages],
            "temperature": temperature,
            "seed": seed,
            "max_tokens": max_tokens,
        }
        if tools and self._native_tools:
            payload["tools"] = [dict(t) for t in tools]
            if self._tool_choice is not None:
                payload["tool_choice"] = self._tool_choice
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        where = f"{self._base_url}/chat/completions"
        conn = self._connection()
        try:
            conn.request("POST", self._path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except TimeoutError as exc:
            conn.close()  # a late answer must not be read as the next request's
            raise BackendError(
                f"{where}: no answer within {self._timeout:g} s", retryable=True
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise BackendError(f"{where}: {type(exc).__name__}: {exc}", retryable=True) from exc
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        if resp.status != 200:
            text = raw[:300].decode("utf-8", "replace")
            retryable = resp.status >= 500 or resp.status in (408, 409, 429)
            raise BackendError(f"{where}: HTTP {resp.status}: {text}", retryable=retryable)
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise BackendError(
                f"{where}: the answer is not JSON: {raw[:200].decode('utf-8', 'replace')!r}",
                retryable=True,
            ) from None
        return parse_completion(parsed)


class LlamaCppBackend:
    """llama-cpp-python in this process (``pip install llama-cpp-python``).

    ``model`` is a GGUF path or an alias resolved by
    :func:`rampart.probe.resolve_model` (``smollm2``, ``qwen2.5-coder-1.5b``).
    Calls are serialised: one llama context is not thread-safe, and consecutive
    prompts sharing a prefix skip its evaluation (llama-cpp-python keeps the KV cache
    of the previous prompt).

    Native tools (``native_tools=True``) go through the GGUF's own chat template,
    which llama-cpp-python renders with ``tools=``; Qwen2.5's template then asks for
    ``<tool_call>{...}</tool_call>`` text, which llama-cpp-python does not parse, so
    the calls are read back here (:func:`parse_text_tool_calls`). Templates of models
    without tool syntax (SmolLM2) ignore ``tools``: render the schemas into the
    prompt for those.
    """

    def __init__(
        self,
        model: str | Path = "smollm2",
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        verbose: bool = False,
        native_tools: bool = True,
    ) -> None:
        from rampart.probe.models import resolve_model

        path = resolve_model(str(model))
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ImportError(
                "the in-process backend needs llama-cpp-python: pip install "
                "'rampart-registry[probe]' (it builds llama.cpp from source, a few minutes)"
            ) from exc
        self._path = path
        self._label = str(model)
        self._native_tools = native_tools
        self._lock = threading.Lock()
        t0 = time.perf_counter()
        self._llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_threads=n_threads or os.cpu_count() or 1,
            verbose=verbose,
        )
        self.load_s = time.perf_counter() - t0

    @property
    def model(self) -> str:
        return self._label

    @property
    def max_concurrency(self) -> int:
        return 1

    @property
    def native_tools(self) -> bool:
        return self._native_tools

    def describe(self) -> dict[str, Any]:
        return {"backend": "llama-cpp", "model": self._label, "model_file": self._path.name}

    def close(self) -> None:
        """Free the model and its context now rather than at garbage collection."""
        with self._lock:
            close = getattr(self._llm, "close", None)
            if close is not None:
                close()

    def chat(
        self,
        messages: Sequence[Message],
        *,
        temperature: float,
        seed: int,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply:
        kwargs: dict[str, Any] = {}
        names: list[str] = []
        if tools and self._native_tools:
            kwargs["tools"] = [dict(t) for t in tools]
            names = [str(t.get("function", t).get("name")) for t in tools]
        with self._lock:
            try:
                out = self._llm.create_chat_completion(
                    messages=[_template_message(m) for m in messages],  # type: ignore[misc]
                    temperature=temperature,
                    seed=seed,
                    max_tokens=max_tokens,
                    **kwargs,
                )
            except ValueError as exc:  # e.g. the prompt exceeds n_ctx
                raise BackendError(f"llama.cpp: {exc}", retryable=False) from exc
        reply = parse_completion(out)
        if names and not reply.calls and ("<tool_call>" in reply.text or '"name"' in reply.text):
            text, calls = parse_text_tool_calls(reply.text, names)
            if calls:
                return Reply(
                    text=text,
                    tool_calls=tuple(c.name for c in calls),
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    calls=calls,
                )
        return reply


def _template_message(m: Message) -> dict[str, Any]:
    """A message as a GGUF chat template reads it: Qwen2.5's template writes a tool
    call's ``arguments`` with ``tojson``, so a JSON string would be quoted twice;
    it gets the parsed object instead."""
    out = dict(m)
    calls = out.get("tool_calls")
    if calls:
        fixed = []
        for c in calls:
            fn = dict(c.get("function", {}))
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    fn["arguments"] = json.loads(args)
                except ValueError:
                    pass
            fixed.append({**c, "function": fn})
        out["tool_calls"] = fixed
    if out.get("content") is None:
        out["content"] = ""
    return out
