"""rampart.telemetry: one OpenTelemetry GenAI span per compile, read back with the
SDK's in-memory exporter; nothing of OpenTelemetry imported or paid for without it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import rampart
from rampart import telemetry

from tests.conftest import ROOT, import_or_skip, words


@pytest.fixture
def spans() -> Iterator[Any]:
    """An SDK provider with an in-memory exporter, given to rampart alone (the
    global provider can be set once a process; other tests must not see it)."""
    import_or_skip("opentelemetry.sdk", "otel")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        telemetry.use_tracer_provider(None)
        telemetry.capture_content(None)
        provider.shutdown()


@pytest.fixture
def registry() -> Iterator[rampart.BlockRegistry]:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None, label="otel-test")
    r.write_block("always run the tests first", "run_tests", priority=1.0)
    r.write_block("never force push to main", "no_force_push")
    r.write_block("a long note " * 20, "long_note")
    yield r
    r.release()


def test_one_span_per_compile_with_gen_ai_attributes(spans: Any, registry: Any) -> None:
    result = registry.compile(max_tokens=12)
    (span,) = spans.get_finished_spans()
    assert span.name == "compile"
    assert span.kind.name == "INTERNAL"
    a = span.attributes
    assert a["gen_ai.operation.name"] == "compile"
    assert a["gen_ai.usage.input_tokens"] == result.total_tokens
    assert a["rampart.registry"] == "otel-test"
    assert a["rampart.registry_id"] == registry.registry_id
    assert a["rampart.max_tokens"] == 12
    assert a["rampart.blocks.included"] == len(result.included) == 2
    assert a["rampart.blocks.excluded"] == 1
    assert "gen_ai.request.model" not in a  # not known to a plain compile
    assert "gen_ai.system_instructions" not in a, "content is opt-in"
    (event,) = [e for e in span.events if e.name == "rampart.block_report"]
    ev = event.attributes
    assert list(ev["rampart.block.names"]) == ["run_tests", "no_force_push", "long_note"]
    assert list(ev["rampart.block.included"]) == [True, True, False]
    assert list(ev["rampart.block.reasons"]) == ["", "", "budget"]
    assert list(ev["rampart.block.tokens"]) == [r.cost for r in result.report]
    assert list(ev["rampart.block.ids"]) == [r.runtime_id for r in result.report]


def test_gated_compile_and_a_failing_compile(spans: Any, registry: Any) -> None:
    def gate(task: str, blocks: list[Any]) -> list[float]:
        return [1.0 if "test" in b.content else 0.0 for b in blocks]

    registry.compile(task_text="tests", top_k=1, gate=gate)
    with pytest.raises(ValueError):
        registry.compile(max_tokens=-1)
    ok, failed = spans.get_finished_spans()
    assert ok.attributes["rampart.gated"] is True and ok.attributes["rampart.top_k"] == 1
    assert ok.attributes["rampart.blocks.included"] == 1
    assert failed.status.status_code.name == "ERROR"
    assert [e.name for e in failed.events] == ["exception"]


def test_content_capture_is_opt_in(
    spans: Any, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.compile()
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    result = registry.compile()
    telemetry.capture_content(False)
    registry.compile()
    plain, captured, off = spans.get_finished_spans()
    assert "gen_ai.system_instructions" not in plain.attributes
    assert json.loads(captured.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": result.prompt}
    ]
    assert "gen_ai.system_instructions" not in off.attributes, "capture_content(False) wins"


def test_acompile_gives_one_span(spans: Any, registry: Any) -> None:
    result = asyncio.run(registry.acompile(max_tokens=12))
    (span,) = spans.get_finished_spans()  # acompile calls compile: still one span
    assert span.attributes["gen_ai.usage.input_tokens"] == result.total_tokens


def test_span_is_a_child_of_the_callers_span(spans: Any, registry: Any) -> None:
    tracer = telemetry.tracing()
    with tracer.start_as_current_span("agent step") as parent:
        registry.compile()
    compile_span, step = spans.get_finished_spans()
    assert step.name == "agent step"
    assert compile_span.parent.span_id == parent.get_span_context().span_id


def test_a_conversation_compile_reports_messages_rewrites_and_cache(
    spans: Any, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = rampart.Conversation()
    log = "x " * 2000
    conv.append({"role": "user", "content": "Why did the build fail?"})
    for k in range(4):
        conv.append(
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"c{k}", "type": "function",
                         "function": {"name": "read_log", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": f"c{k}", "content": log},
            ]
        )  # fmt: skip
    registry.compile(conversation=conv, context_window=100_000)
    conv.observe_usage(
        {"input_tokens": 40, "cache_read_input_tokens": 7000, "cache_creation_input_tokens": 900}
    )
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "1")
    result = registry.compile(conversation=conv, context_window=6000, reply_tokens=500)
    first, second = spans.get_finished_spans()
    assert "gen_ai.usage.cache_read.input_tokens" not in first.attributes  # no usage yet
    a = second.attributes
    ctx = result.context
    assert a["rampart.context_window"] == 6000 and a["rampart.reply_tokens"] == 500
    assert a["gen_ai.usage.input_tokens"] == ctx.fixed_tokens + ctx.message_tokens
    assert a["rampart.message_tokens"] == ctx.message_tokens <= ctx.budget
    assert a["gen_ai.usage.cache_read.input_tokens"] == 7000
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 900
    (event,) = [e for e in second.events if e.name == "rampart.message_report"]
    ev = event.attributes
    assert list(ev["rampart.message.ids"]) == [r.id for r in result.message_report]
    assert list(ev["rampart.message.actions"]) == [r.action for r in result.message_report]
    assert "cleared" in ev["rampart.message.actions"]
    rewrites = [e for e in second.events if e.name == "rampart.prefix_rewrite"]
    assert len(rewrites) == len(ctx.rewrites) >= 1
    assert rewrites[0].attributes["rampart.rewrite.reason"] == ctx.rewrites[0].reason
    assert json.loads(a["gen_ai.input.messages"]) == result.messages("openai_chat")


def test_cache_tokens_from_provider_usage_shapes() -> None:
    anthropic = {
        "input_tokens": 10,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 50,
    }
    openai_chat = {"prompt_tokens": 1000, "prompt_tokens_details": {"cached_tokens": 768}}
    responses = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 512}}
    gemini = {"prompt_token_count": 1000, "cached_content_token_count": 256}
    assert telemetry._cache_tokens(anthropic) == (900, 50)
    assert telemetry._cache_tokens(openai_chat) == (768, None)
    assert telemetry._cache_tokens(responses) == (512, None)
    assert telemetry._cache_tokens(gemini) == (256, None)
    assert telemetry._cache_tokens({"cache_read_input_tokens": -3}) == (None, None)
    assert telemetry._cache_tokens(None) == (None, None)


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_rampart_imports_no_opentelemetry_and_compiles_untraced() -> None:
    # A fresh interpreter: whether anything at `import rampart` loads OpenTelemetry,
    # and that a compile then takes the untraced path (no tracer is ever made).
    code = (
        "import sys, rampart\n"
        "from rampart import telemetry\n"
        "r = rampart.BlockRegistry(tokeniser=len)\n"
        "r.write_block('x', 'x'); r.compile()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')),"
        " telemetry._tracer is None)"
    )
    assert _run(code) == "[] True"


def test_global_provider_set_after_import_is_followed() -> None:
    import_or_skip("opentelemetry.sdk", "otel")
    code = (
        "import rampart\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "r = rampart.BlockRegistry(tokeniser=len)\n"
        "r.write_block('x', 'x')\n"
        "r.compile()  # API imported, no SDK provider yet: nothing recorded\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "r.compile(); r.compile()\n"
        "print([s.name for s in exporter.get_finished_spans()])"
    )
    assert _run(code) == "['compile', 'compile']"
