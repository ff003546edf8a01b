"""OpenTelemetry: one GenAI span per compile.

When the application has set up OpenTelemetry tracing (an SDK ``TracerProvider``),
each :meth:`BlockRegistry.compile` / ``acompile`` is an ``INTERNAL`` span named
``compile`` (``compile {model}`` when the request model is known) carrying the
``gen_ai.*`` semantic-convention attributes a GenAI dashboard reads:

- ``gen_ai.operation.name`` = ``"compile"``; ``gen_ai.request.model`` when known
  (a ``model`` the compile was given, or the conversation's);
- ``gen_ai.usage.input_tokens``: the tokens of the request as compiled;
- ``gen_ai.usage.cache_read.input_tokens`` / ``gen_ai.usage.cache_creation.input_tokens``:
  from the provider ``usage`` last given to ``Conversation.observe_usage`` (the call
  made with the previous compile), when there is one;
- ``rampart.*``: registry, budget, context window, blocks in and out, the stable
  prefix; with a conversation, its message tokens, budget and count scale;

and span events: the block report (``rampart.block_report``) and, with a
conversation, the message report (``rampart.message_report``), each one event of
parallel arrays (ids, names or actions, reasons, tokens), so a 10 000-block registry
stays one event under the SDK's default limit of 128 events a span; and one
``rampart.prefix_rewrite`` per place the policy rewrote the body's prefix (where,
why, tokens removed).

What the prompt and messages *say* is recorded only on request: set
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (the variable the
OpenTelemetry GenAI instrumentations read) or call :func:`capture_content`.

Zero cost without OpenTelemetry: ``import rampart`` imports nothing of it, and a
compile only looks ``opentelemetry.trace`` up in ``sys.modules`` (an application
that never imported OpenTelemetry cannot have configured a tracer). With the API
imported but no SDK provider set, a compile checks the provider's type and goes on.
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rampart._view import RegistryView
    from rampart.block import CompileResult

__all__ = ["CAPTURE_CONTENT_ENV", "capture_content", "tracing", "use_tracer_provider"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

TRACE_MODULE = "opentelemetry.trace"  # compile looks this up in sys.modules first
_tracer: Any = None
_capture: bool | None = None  # None: follow the environment variable
# Set inside a traced compile, so the compile it calls is not traced a second time
# (and an acompile that calls compile gives one span, not two).
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rampart_compile_span", default=False
)


def capture_content(on: bool | None) -> None:
    """Record the compiled prompt and messages on compile spans (``True``), never
    (``False``), or as ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says
    (``None``, the default)."""
    global _capture
    _capture = on


def use_tracer_provider(provider: Any) -> None:
    """Send compile spans to ``provider`` (an OpenTelemetry ``TracerProvider``)
    instead of the global one; ``None`` goes back to the global provider."""
    global _tracer
    if provider is None:
        _tracer = None
        return
    from rampart import __version__

    _tracer = provider.get_tracer("rampart", __version__)


def tracing() -> Any:
    """The tracer compile spans go to, or None when no span would be recorded:
    OpenTelemetry not imported, no SDK provider set, or already inside a compile span.

    The first check is one dict lookup, which is all a compile pays without
    OpenTelemetry."""
    trace = sys.modules.get(TRACE_MODULE)
    if trace is None or _inside.get():
        return None
    global _tracer
    if _tracer is None:
        provider = trace.get_tracer_provider()
        # The API's default provider records nothing (and the no-op one never will);
        # looked at each call until the application sets a real one, then cached.
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
        from rampart import __version__

        _tracer = provider.get_tracer("rampart", __version__)
    return _tracer


def traced_compile(registry: RegistryView, args: Mapping[str, Any]) -> CompileResult:
    """``registry.compile(**args)`` inside a compile span (``args``: compile's locals)."""
    tracer = tracing()
    kwargs = {k: v for k, v in args.items() if k != "self"}
    token = _inside.set(True)
    try:
        with tracer.start_as_current_span(
            _span_name(kwargs), kind=_internal(), attributes=_request_attributes(kwargs)
        ) as span:
            result = registry.compile(**kwargs)
            if span.is_recording():
                _record(span, registry, result, kwargs)
            return result
    finally:
        _inside.reset(token)


async def atraced_compile(registry: RegistryView, args: Mapping[str, Any]) -> CompileResult:
    """``await registry.acompile(**args)`` inside a compile span."""
    tracer = tracing()
    kwargs = {k: v for k, v in args.items() if k != "self"}
    token = _inside.set(True)
    try:
        with tracer.start_as_current_span(
            _span_name(kwargs), kind=_internal(), attributes=_request_attributes(kwargs)
        ) as span:
            result = await registry.acompile(**kwargs)
            if span.is_recording():
                _record(span, registry, result, kwargs)
            return result
    finally:
        _inside.reset(token)


def _internal() -> Any:
    return sys.modules[TRACE_MODULE].SpanKind.INTERNAL


def _model(kwargs: Mapping[str, Any]) -> str | None:
    model = kwargs.get("model")
    if model is None:
        model = getattr(kwargs.get("conversation"), "model", None)
    return model if isinstance(model, str) and model else None


def _span_name(kwargs: Mapping[str, Any]) -> str:
    # The GenAI convention: "{operation} {model}".
    model = _model(kwargs)
    return "compile" if model is None else f"compile {model}"


def _request_attributes(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "compile"}
    model = _model(kwargs)
    if model is not None:
        attrs["gen_ai.request.model"] = model
    for arg, name in (
        ("max_tokens", "rampart.max_tokens"),
        ("context_window", "rampart.context_window"),
        ("reply_tokens", "rampart.reply_tokens"),
        ("top_k", "rampart.top_k"),
        ("relevance_threshold", "rampart.relevance_threshold"),
    ):
        v = kwargs.get(arg)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            attrs[name] = v
    if kwargs.get("task_text") is not None:
        attrs["rampart.gated"] = True
    return attrs


def _record(
    span: Any, registry: RegistryView, result: CompileResult, kwargs: Mapping[str, Any]
) -> None:
    report = result.report
    included = sum(1 for r in report if r.included)
    context = getattr(result, "context", None)
    request_tokens = (
        None if context is None else int(context.fixed_tokens) + int(context.message_tokens)
    )
    span.set_attributes(
        {
            "rampart.registry": registry.label,
            "rampart.registry_id": registry.registry_id,
            "rampart.blocks.included": included,
            "rampart.blocks.excluded": len(report) - included,
            "rampart.prompt_tokens": result.total_tokens,
            "rampart.stable_prefix_tokens": result.stable_prefix_tokens,
            "gen_ai.usage.input_tokens": (
                request_tokens if isinstance(request_tokens, int) else result.total_tokens
            ),
        }
    )
    if result.max_tokens is not None:
        span.set_attribute("rampart.max_tokens", result.max_tokens)
    span.add_event(
        "rampart.block_report",
        {
            "rampart.block.ids": [r.runtime_id for r in report],
            "rampart.block.names": [r.name for r in report],
            "rampart.block.included": [r.included for r in report],
            "rampart.block.reasons": [r.reason or "" for r in report],
            "rampart.block.tokens": [r.cost for r in report],
        },
    )
    if context is not None:
        span.set_attributes(
            {
                "rampart.message_tokens": int(context.message_tokens),
                "rampart.scale": float(context.scale),
            }
        )
        if context.budget is not None:
            span.set_attribute("rampart.message_budget", int(context.budget))
        for note in context.rewrites:
            # Where the body's prefix was rewritten (the provider's cache lost from there).
            span.add_event(
                "rampart.prefix_rewrite",
                {
                    "rampart.rewrite.at_item": note.at_item,
                    "rampart.rewrite.at_index": note.at_index,
                    "rampart.rewrite.reason": note.reason,
                    "rampart.rewrite.action": note.action,
                    "rampart.rewrite.tokens_removed": note.tokens_removed,
                    "rampart.rewrite.prefix_tokens": note.prefix_tokens,
                },
            )
    messages = getattr(result, "message_report", None)
    if messages:
        span.add_event(
            "rampart.message_report",
            {
                "rampart.message.ids": [str(m.id) for m in messages],
                "rampart.message.actions": [str(m.action) for m in messages],
                "rampart.message.reasons": [str(m.reason or "") for m in messages],
                "rampart.message.tokens": [int(m.tokens) for m in messages],
            },
        )
    conversation = kwargs.get("conversation")
    if conversation is not None:
        cached, written = _cache_tokens(_last_usage(conversation))
        if cached is not None:
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", cached)
        if written is not None:
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", written)
    if _capturing():
        span.set_attribute(
            "gen_ai.system_instructions",
            json.dumps([{"type": "text", "content": result.prompt}], ensure_ascii=False),
        )
        if context is not None:
            span.set_attribute(
                "gen_ai.input.messages",
                json.dumps(result.messages("openai_chat"), ensure_ascii=False),
            )


def _capturing() -> bool:
    if _capture is not None:
        return _capture
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def _last_usage(conversation: Any) -> Any:
    # The usage of the call made with the previous compile (Conversation.observe_usage):
    # what the provider's cache served and wrote for this conversation's prefix.
    return getattr(conversation, "last_usage", None)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _cache_tokens(usage: Any) -> tuple[int | None, int | None]:
    """(cache read, cache creation) tokens of a provider ``usage`` (Anthropic's
    ``cache_read_input_tokens``/``cache_creation_input_tokens``, OpenAI's
    ``prompt_tokens_details.cached_tokens`` or Responses'
    ``input_tokens_details.cached_tokens``, Gemini's ``cached_content_token_count``),
    None where it does not say."""
    if usage is None:
        return None, None
    read = _count(_field(usage, "cache_read_input_tokens"))
    written = _count(_field(usage, "cache_creation_input_tokens"))
    if read is None:
        for details in ("prompt_tokens_details", "input_tokens_details"):
            d = _field(usage, details)
            if d is not None and _count(_field(d, "cached_tokens")) is not None:
                read = _field(d, "cached_tokens")
                break
    if read is None:
        read = _count(_field(usage, "cached_content_token_count"))
    return read, written
