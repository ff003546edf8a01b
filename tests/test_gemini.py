"""Gemini as one provider module (rampart.providers.gemini): declarations read by
load_tools/parse_tools, request bodies and the explicit cache payload, validated
against the installed google-genai SDK's pydantic types (``extra="forbid"``: an
unknown key is an error)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rampart
from rampart.adapters import gemini_cache_payload, gemini_generate_content
from rampart.caching import price_table
from rampart.errors import InvalidArgumentError, UnsupportedFormatError
from rampart.providers import PROVIDERS, gemini, provider

from tests.conftest import import_or_skip, words
from tests.test_adapters import DATA, GIT, overlap_gate

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "OBJECT",
        "properties": {
            "city": {"type": "STRING", "description": "City name"},
            "days": {"type": "INTEGER", "nullable": True},
        },
        "required": ["city"],
    },
}
USER = [{"role": "user", "parts": [{"text": "What changed since yesterday?"}]}]


def types() -> Any:
    return import_or_skip("google.genai.types", "sdks")


@pytest.fixture
def greg() -> Any:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("Follow the house rules carefully. " * 300, "rules", gated=False)
    r.load_tools(GIT, gated=False)
    for i, topic in enumerate(["commit message", "branch name", "file reading"]):
        r.write_block(f"Lesson {i} on the {topic}: think about the {topic}. " * 5, f"lesson_{i}")
    r.load_tools(DATA / "mcp_filesystem_tools.json")
    yield r
    r.release()


def gated(r: Any, task: str) -> Any:
    return r.compile(task_text=task, top_k=3, gate=overlap_gate)


def test_gemini_declarations_load_in_every_spelling() -> None:
    tools = rampart.parse_tools(
        [
            WEATHER,  # parameters: Gemini's OpenAPI subset, upper-case types
            {
                "function_declarations": [
                    {"name": "noop", "parameters_json_schema": {"type": "object"}}
                ]
            },
            {"name": "echo", "parametersJsonSchema": {"type": "object", "properties": {}}},
        ]
    )
    assert [t.name for t in tools] == ["get_weather", "noop", "echo"]
    assert {t.source_format for t in tools} == {"gemini"}
    assert tools[0].input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": ["integer", "null"]},
        },
        "required": ["city"],
    }
    reg = rampart.BlockRegistry(label=None)
    ids = reg.load_tools([WEATHER])  # once refused as "a bare OpenAI function"
    assert reg.get_by_id(ids[0]).tool_schema == tools[0]
    reg.release()


def test_bad_gemini_declarations_name_the_entry() -> None:
    both = {"name": "x", "parameters": {}, "parameters_json_schema": {}}
    with pytest.raises(UnsupportedFormatError, match=r"tools\[0\] \('x'\): .*not both"):
        rampart.parse_tools([both])
    with pytest.raises(UnsupportedFormatError, match='"function_declarations" must be an array'):
        rampart.parse_tools({"function_declarations": {"name": "x"}})
    deep: dict[str, Any] = {"type": "OBJECT"}
    for _ in range(100):
        deep = {"type": "OBJECT", "properties": {"a": deep}}
    with pytest.raises(UnsupportedFormatError, match="deeper than"):
        rampart.parse_tools([{"name": "deep", "parameters": deep}])


def test_declarations_validate_against_the_sdk(greg: Any) -> None:
    t = types()
    result = greg.compile()
    for decl in result.tools("gemini"):
        t.FunctionDeclaration.model_validate(decl)
    assert result.tools("gemini")[0]["parameters_json_schema"]["required"] == ["repo_path"]


@pytest.mark.parametrize("choice", ["gated", "all", "allowed"])
def test_generate_content_bodies_validate(greg: Any, choice: str) -> None:
    t = types()
    result = gated(greg, "read the file")
    body = gemini_generate_content(
        result, USER, model="gemini-2.5-flash", tools=choice, temperature=0.2
    )
    assert list(body) == ["model", "contents", "config"]
    config = t.GenerateContentConfig.model_validate(body["config"])
    assert config.system_instruction == result.prompt and config.temperature == 0.2
    [t.Content.model_validate(c) for c in body["contents"]]
    names = [d["name"] for d in body["config"]["tools"][0]["function_declarations"]]
    gated_names = [d["name"] for d in result.tools("gemini")]
    if choice == "gated":
        assert names == gated_names and "tool_config" not in body["config"]
    else:
        assert names == [d["name"] for d in result.registry_tools("gemini")]
    if choice == "allowed":
        fc = body["config"]["tool_config"]["function_calling_config"]
        assert fc == {"mode": "VALIDATED", "allowed_function_names": gated_names}
    json.dumps(body)


def test_all_and_allowed_send_the_same_tools_for_every_task(greg: Any) -> None:
    a, b = gated(greg, "read the file"), gated(greg, "write a commit message")
    assert a.tools("gemini") != b.tools("gemini")  # the gate picks other tools
    for choice in ("all", "allowed"):
        ta = gemini_generate_content(a, model="m", tools=choice)["config"]["tools"]
        tb = gemini_generate_content(b, model="m", tools=choice)["config"]["tools"]
        assert json.dumps(ta) == json.dumps(tb)


def test_allowed_with_nothing_gated_calls_nothing() -> None:
    r = rampart.BlockRegistry(tokeniser=words, default_max_tokens=None)
    r.write_block("rules", "rules", gated=False)
    r.load_tools([WEATHER])
    res = r.compile(task_text="x", relevance_threshold=0.0, gate=lambda task, blocks: [1.0, -1.0])
    body = gemini_generate_content(res, model="m", tools="allowed")
    assert body["config"]["tool_config"] == {"function_calling_config": {"mode": "NONE"}}
    r.release()


def test_explicit_cache_payload_and_its_use(greg: Any) -> None:
    t = types()
    a, b = gated(greg, "read the file"), gated(greg, "write a commit message")
    pa = gemini_cache_payload(a, model="gemini-2.5-flash", ttl_s=600, display_name="head")
    pb = gemini_cache_payload(b, model="gemini-2.5-flash", ttl_s=600, display_name="head")
    assert json.dumps(pa) == json.dumps(pb)  # the cache does not depend on the task
    cfg = t.CreateCachedContentConfig.model_validate(pa["config"])
    assert cfg.ttl == "600s" and cfg.system_instruction == a.stable_prefix
    body = gemini_generate_content(a, USER, model="gemini-2.5-flash", tools="all",
                                   cached_content="cachedContents/abc")  # fmt: skip
    config = body["config"]
    assert config == {"cached_content": "cachedContents/abc"}  # nothing the cache holds
    t.GenerateContentConfig.model_validate(config)
    first = body["contents"][0]
    assert first == {"role": "user", "parts": [{"text": a.prompt[a.stable_prefix_chars :]}]}
    assert body["contents"][1:] == USER
    with pytest.raises(InvalidArgumentError, match="tools='all' or 'allowed'"):
        gemini_generate_content(a, model="m", cached_content="cachedContents/abc")
    with pytest.raises(InvalidArgumentError, match="tool_config"):
        gemini_generate_content(a, model="m", tools="allowed", cached_content="cachedContents/x")
    with pytest.raises(InvalidArgumentError, match="cache name"):
        gemini_generate_content(a, model="m", tools="all", cached_content="abc")


def test_refusals_name_the_argument(greg: Any) -> None:
    res = greg.compile()
    with pytest.raises(InvalidArgumentError, match="tools must be one of"):
        gemini_generate_content(res, model="m", tools="deferred")
    with pytest.raises(InvalidArgumentError, match=r"contents\[0\] has role 'system'"):
        gemini_generate_content(res, [{"role": "system", "parts": []}], model="m")
    with pytest.raises(InvalidArgumentError, match="contents must be a list"):
        gemini_generate_content(res, "hello", model="m")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="system_instruction cannot be passed"):
        gemini_generate_content(res, model="m", system_instruction="x")
    with pytest.raises(InvalidArgumentError, match="model must be"):
        gemini_generate_content(res, model="")


def test_price_table_and_when_an_explicit_cache_pays() -> None:
    flash = price_table("gemini")
    assert (flash.read, flash.write, flash.min_tokens) == (0.1, 1.0, 1024)
    assert flash.storage_per_hour > 0 and "ai.google.dev" in flash.source
    assert price_table("gemini-pro").min_tokens == 4096
    # Storage per hour is ~3.3 input-token prices a token; each call that the
    # implicit cache misses saves 0.9 of one: a few calls an hour pay for it.
    assert not gemini.explicit_cache_pays(900, 100)  # below the minimum size
    assert not gemini.explicit_cache_pays(5000, 3)
    assert gemini.explicit_cache_pays(5000, 10)
    assert not gemini.explicit_cache_pays(5000, 10, implicit_hit_rate=0.9)


def test_the_provider_table_maps_names_to_modules() -> None:
    assert provider("gemini") is gemini and "gemini" in PROVIDERS
    with pytest.raises(InvalidArgumentError, match="unknown provider 'nope'"):
        provider("nope")
