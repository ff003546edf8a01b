"""Chat backends shared by the agent loop and the probes.

- :class:`OpenAIBackend`: any OpenAI-compatible ``/chat/completions`` endpoint over
  HTTP (llama.cpp's server, Ollama, vLLM, hosted APIs). Standard library only
  (:mod:`rampart._http`): idle keep-alive connections are reused, so a call costs
  one request, not a TCP handshake; each call is bounded in time (one deadline for
  the whole call), body size and JSON depth, whatever the server sends.
- :class:`LlamaCppBackend`: llama-cpp-python in this process. Calls are serialised
  (one context); consecutive prompts that share a prefix reuse its KV cache, which
  is what makes a position sweep or an agent's growing conversation affordable on
  two CPU cores.

Both take native ``tools`` (OpenAI Chat Completions shape) and return the tool calls
the model made as :class:`ToolCall` objects (``Reply.calls``). A backend raises
:class:`BackendError` for a failed call; ``retryable`` says whether the caller should
try again (timeouts, 5xx, 429, malformed bodies) or record the failure at once (a 4xx
that will not change, a body over the size limit, a redirect elsewhere).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import rampart._http as _http
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
    """A chat call failed; ``retryable`` tells the caller whether to try again.

    From :class:`OpenAIBackend` also: ``url`` (the endpoint), ``status`` (the HTTP
    status, ``None`` when none came) and ``retry_after`` (the seconds the server
    asked to wait, ``None`` when it did not say)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        url: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.url = url
        self.status = status
        self.retry_after = retry_after


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


# A UTF-16 surrogate alone: JSON's "\ud800" escape decodes to one, and it is not
# text (encoding it to UTF-8 fails far from here, in the registry or a tokeniser).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str) -> str:
    return value if value.isascii() else _LONE_SURROGATE.sub("\ufffd", value)


def _arguments_text(raw: Any) -> str:
    # Servers send arguments as a JSON string; a few send the object itself.
    if isinstance(raw, str):
        return _text(raw)
    if raw is None:
        return "{}"
    # allow_nan=False: a float that overflowed to inf (1e999) is not JSON to re-send.
    return _text(json.dumps(raw, allow_nan=False))


def parse_completion(body: Any) -> Reply:
    """Read an OpenAI chat-completion body; anything else is a retryable BackendError
    (a small model behind a flaky proxy sometimes returns half a body)."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise TypeError("content is not a string")
        text = _text(text)
        calls = tuple(
            ToolCall(
                id=_text(str(c.get("id") or f"call_{i}")),
                name=_text(str(c["function"]["name"])),
                arguments=_arguments_text(c["function"].get("arguments")),
            )
            for i, c in enumerate(message.get("tool_calls") or [])
            if c
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        snippet = _snippet(body)
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


#: Token counts above this are not counts: reported as unknown (``None``).
MAX_TOKEN_COUNT = 2**32


def _int_or_none(v: Any) -> int | None:
    # A count is an int in [0, MAX_TOKEN_COUNT]; anything else (a bool, a float, a
    # negative or absurd number) would corrupt the run's token totals.
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKEN_COUNT
    return v if ok else None


def _snippet(body: Any) -> str:
    if isinstance(body, str):
        return body[:200]
    try:
        return json.dumps(body)[:200]
    except (ValueError, TypeError, RecursionError):
        return repr(type(body))


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
    ``{"name", "arguments"}`` or one call per line in doubled braces (what
    Qwen2.5-Coder-1.5B often writes instead). Returns the text without them, and the
    calls. Only names in ``known`` count, so prose that happens to hold the tag does
    not become a call; a body that is not JSON (or nests deeper than
    ``_http.MAX_JSON_DEPTH``) is left in the text."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            call = _call_object(_http.loads_text(m.group(1)), known)
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
            call = _call_object(_http.loads_text(body), known)
        except ValueError:
            call = None
        if call is not None:
            return "", (call,)
        lined = _calls_per_line(text, known)
        if lined:
            return "", lined
    return "".join(kept).strip(), tuple(calls)


# A reply of more lines than this is prose, not a list of calls.
_MAX_CALL_LINES = 16
_DECODER = json.JSONDecoder()


def _calls_per_line(text: str, known: Sequence[str]) -> tuple[ToolCall, ...]:
    """The reply as one call object per line, each possibly in extra braces —
    ``{{"name": ..., "arguments": {...}}}``, what Qwen2.5-Coder-1.5B wrote in the
    tools demo (saved replies in ``benches/agent_tools_demo_qwen.json``). Every
    line must be a call to a known tool, else none counts: prose that quotes a
    call stays prose."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines or len(lines) > _MAX_CALL_LINES:
        return ()
    calls: list[ToolCall] = []
    for line in lines:
        opening = len(line) - len(line.lstrip("{"))
        if opening < 2:
            return ()  # one brace: the single-object rule above already tried it
        try:
            # The call is the innermost object the extra braces wrap; what
            # follows it may only be closing braces (models miscount them).
            obj, end = _DECODER.raw_decode(line, opening - 1)
        except (ValueError, RecursionError):
            return ()
        if line[end:].strip("} \t") or not _http.within_depth(obj):
            return ()
        call = _call_object(obj, known)
        if call is None:
            return ()
        calls.append(call)
    return tuple(calls)


class OpenAIBackend:
    """An OpenAI-compatible chat endpoint, e.g. ``http://127.0.0.1:8080/v1``.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` (local servers ignore it).
    ``native_tools`` sends tool schemas in the request's ``tools`` field; turn it off
    for servers or chat templates without tool support (the probes do, and render the
    schemas into the prompt instead). ``tool_choice`` is sent with the tools:
    llama.cpp-python's function-calling chat format drops the tools unless it is
    ``"auto"``.

    Bounds (docs/limits.md): ``timeout`` is the deadline of a whole call —
    connecting, sending, waiting for the headers, reading the body and any retries
    — not of each socket read. ``max_body`` caps the answer's size in bytes (16 MiB:
    a completion of ``max_tokens`` tokens is kilobytes). ``max_retries`` retries a
    call inside ``chat`` after a connection failure or a 408/409/425/429/5xx answer,
    honouring ``Retry-After`` when it fits in the time left; the default 0 leaves
    retrying to the caller (the probe runner counts attempts itself). Every
    failure is a :class:`BackendError` naming the URL.
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
        max_body: int = 16 << 20,
        max_retries: int = 0,
    ) -> None:
        try:
            self._client = _http.JSONClient(base_url)
        except ValueError:
            raise InvalidArgumentError(
                f"base_url {base_url!r}: expected http(s)://host[:port]/path, "
                "e.g. http://127.0.0.1:8080/v1"
            ) from None
        if type(concurrency) is not int or concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise InvalidArgumentError(f"timeout must be a number of seconds, got {timeout!r}")
        if not (0 < timeout < math.inf):
            raise InvalidArgumentError(f"timeout must be positive and finite, got {timeout}")
        if type(max_body) is not int or max_body < 1:
            raise InvalidArgumentError(f"max_body must be an int >= 1, got {max_body!r}")
        if type(max_retries) is not int or max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self._base_url = self._client.base_url
        self._model = model
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if self._api_key:
            bad = _http.check_header("Authorization", f"Bearer {self._api_key}")
            if bad is not None:
                raise InvalidArgumentError(f"api_key cannot be sent: {bad}")
        self._timeout = float(timeout)
        self._max_body = max_body
        self._max_retries = max_retries
        self._concurrency = concurrency
        self._native_tools = native_tools
        self._tool_choice = tool_choice

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

    def close(self) -> None:
        """Close the idle keep-alive connections (calls after this open new ones)."""
        self._client.close()

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
        try:
            parsed = self._client.post(
                "/chat/completions",
                body,
                headers,
                timeout=self._timeout,
                max_body=self._max_body,
                retries=self._max_retries,
            )
        except _http.HTTPFailure as failure:
            tries = f" (after {failure.attempts} tries)" if failure.attempts > 1 else ""
            raise BackendError(
                f"{failure}{tries}",
                retryable=failure.retryable,
                url=failure.url,
                status=failure.status,
                retry_after=failure.retry_after,
            ) from None
        try:
            return parse_completion(parsed)
        except BackendError as exc:
            url = f"{self._base_url}/chat/completions"
            raise BackendError(f"{url}: {exc}", retryable=exc.retryable, url=url) from None


_DEVNULL_CLOSER: list[bool] = []


def _close_llama_devnull_at_exit() -> None:
    """llama-cpp-python opens /dev/null twice when imported (``outnull_file`` and
    ``errnull_file`` in ``llama_cpp/_utils.py``, to silence llama.cpp while a model
    loads) and never closes them, so every process that used it ended with
    ``sys:1: ResourceWarning: unclosed file`` twice (``make test`` printed both).
    They serve only while a ``Llama`` is being built, which cannot happen once exit
    handlers run: they are closed then."""
    if _DEVNULL_CLOSER:
        return
    _DEVNULL_CLOSER.append(True)

    def close() -> None:
        utils = sys.modules.get("llama_cpp._utils")
        for name in ("outnull_file", "errnull_file"):
            f = getattr(utils, name, None)
            if f is not None and hasattr(f, "close"):
                f.close()

    atexit.register(close)


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
        from rampart.gguf import resolve_model

        path = resolve_model(str(model))
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ImportError(
                "the in-process backend needs llama-cpp-python: pip install "
                "'rampart-registry[probe]' (it builds llama.cpp from source, a few minutes)"
            ) from exc
        _close_llama_devnull_at_exit()
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
                    fn["arguments"] = _http.loads_text(args)
                except ValueError:
                    pass
            fixed.append({**c, "function": fn})
        out["tool_calls"] = fixed
    if out.get("content") is None:
        out["content"] = ""
    return out
