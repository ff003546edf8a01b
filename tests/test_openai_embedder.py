"""OpenAIEmbedder against a real local HTTP server speaking /v1/embeddings."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from rampart import BlockRegistry
from rampart.embeddings.openai import OpenAIEmbedder
from rampart.errors import InvalidArgumentError, ModelError

from tests.fake_embeddings import DIM, FakeEmbeddings, embed


def client(server: FakeEmbeddings, **kw: Any) -> OpenAIEmbedder:
    kw.setdefault("backoff", 0.0)
    return OpenAIEmbedder(server.base_url, "fake-embed", **kw)


def test_vectors_in_input_order_and_batched() -> None:
    texts = ["alpha beta", "gamma", "delta epsilon", "zeta", "eta theta"]
    with FakeEmbeddings() as server:
        emb = client(server, batch_size=2)
        vectors = emb.encode_batch(texts)
    for got, text in zip(vectors, texts):
        assert got == pytest.approx(embed(text))
    assert [r["input"] for r in server.requests] == [texts[0:2], texts[2:4], texts[4:]]
    assert all(
        r["model"] == "fake-embed" and r["encoding_format"] == "float" for r in server.requests
    )
    assert emb.dim == DIM and emb.requests == 3
    assert emb.model_id == f"openai:fake-embed@{server.base_url}"


def test_registry_gate_uses_the_endpoint() -> None:
    with FakeEmbeddings() as server:
        reg = BlockRegistry(embedding_model=client(server))
        reg.write_block("Write dates as ISO 8601 year month day.", "dates")
        reg.write_block("Run pytest before every commit.", "tests")
        reg.write_block("Use snake case names for functions.", "style")
        ranked = reg.find_relevant("which format for dates year month day", top_k=1)
        result = reg.compile(task_text="run pytest before commit", top_k=1)
    assert ranked[0][0].semantic_name == "dates"
    assert result.included == ["tests"]
    assert "pytest" in result.prompt and "snake" not in result.prompt


def test_retries_transient_failures_then_succeeds() -> None:
    failures: list[Any] = [503, (429, {"Retry-After": "0"}, b'{"error": "slow down"}')]
    with FakeEmbeddings(failures=failures) as server:
        emb = client(server, max_retries=2)
        assert emb.encode("hello world") == pytest.approx(embed("hello world"))
    assert emb.requests == 3 and len(server.requests) == 3


def test_gives_up_after_max_retries_with_the_servers_message() -> None:
    with FakeEmbeddings(failures=[503, 503, 503]) as server:
        emb = client(server, max_retries=2)
        with pytest.raises(ModelError, match=r"HTTP 503.*scripted failure 503.*after 3 tries"):
            emb.encode("x")
    assert len(server.requests) == 3


def test_client_errors_are_not_retried() -> None:
    with FakeEmbeddings(failures=[400]) as server:
        emb = client(server, max_retries=5)
        with pytest.raises(ModelError, match=r"/v1/embeddings answered HTTP 400 for model"):
            emb.encode("x")
    assert len(server.requests) == 1


def test_api_key_is_sent_as_bearer_token() -> None:
    with FakeEmbeddings(api_key="sk-test") as server:
        assert client(server, api_key="sk-test").encode("a b")
        with pytest.raises(ModelError, match=r"HTTP 401 \(check api_key\).*Incorrect API key"):
            client(server, api_key="wrong").encode("a b")
        with pytest.raises(ModelError, match="401"):
            client(server).encode("a b")
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert "Authorization" not in server.headers[2]


def test_unreachable_endpoint() -> None:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.0)
    with pytest.raises(
        ModelError, match=rf"127.0.0.1:{port}/v1/embeddings unreachable after 2 tries"
    ):
        emb.encode("x")


def test_request_options_reach_the_server() -> None:
    with FakeEmbeddings() as server:
        emb = client(server, dimensions=16, extra_body={"input_type": "passage"})
        (vec,) = emb.encode_batch([""])
    assert len(vec) == 16 and emb.dim == 16
    assert server.requests[0]["input"] == [" "]  # empty text keeps its slot
    assert server.requests[0]["dimensions"] == 16
    assert server.requests[0]["input_type"] == "passage"


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda a: {"object": "list"}, 'without a "data" list'),
        (lambda a: {**a, "data": a["data"][:1]}, "returned 1 embeddings for 2 inputs"),
        (
            lambda a: {**a, "data": [{**a["data"][0], "index": 0}, a["data"][1]]},
            "bad or repeated index",
        ),
        (
            lambda a: {
                **a,
                "data": [{**d, "embedding": d["embedding"][: 3 + d["index"]]} for d in a["data"]],
            },
            "dimensions, earlier vectors had",
        ),
        (
            lambda a: {**a, "data": [{**d, "embedding": ["x"]} for d in a["data"]]},
            "non-numbers",
        ),
        (
            lambda a: {**a, "data": [{**d, "embedding": [float("nan")]} for d in a["data"]]},
            "not finite",
        ),
    ],
)
def test_malformed_answers_are_refused(mangle: Any, message: str) -> None:
    with FakeEmbeddings(mangle=mangle) as server:
        with pytest.raises(ModelError, match=message):
            client(server).encode_batch(["one", "two"])


def test_non_json_answer() -> None:
    with FakeEmbeddings(failures=[(200, {}, b"<html>proxy</html>")]) as server:
        with pytest.raises(ModelError, match="not JSON"):
            client(server).encode("x")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "localhost:8080"},
        {"model": ""},
        {"batch_size": 0},
        {"max_retries": -1},
        {"timeout": -1},
        {"dimensions": 0},
    ],
)
def test_bad_arguments(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(InvalidArgumentError, match="OpenAIEmbedder"):
        OpenAIEmbedder(args.pop("base_url"), args.pop("model"), **args)


def test_non_string_text() -> None:
    emb = OpenAIEmbedder("http://127.0.0.1:1/v1", "m")
    with pytest.raises(InvalidArgumentError, match=r"texts\[1\] must be a str"):
        emb.encode_batch(["a", 3])  # type: ignore[list-item]
