"""pytest-benchmark: what the bounds of ``rampart._http`` cost per call.

    python -m pytest benches/test_bench_http.py --benchmark-only -p no:cacheprovider -q

Each group pairs the bounded client with an unbounded baseline measured in the same
run against the same local server:

- ``http-chat``: ``OpenAIBackend.chat`` against a keep-alive chat server, beside a
  bare ``http.client`` keep-alive POST + ``json.loads`` (what the client did before
  it had a deadline, a size cap and depth checks).
- ``http-embed``: ``OpenAIEmbedder.encode_batch`` of 64 texts (256-d) beside the
  same request through ``urllib.request`` + ``json.loads`` (the embedder's old way:
  a new connection per request).
- ``http-json``: parsing a 64 × 1 536 embeddings answer (2 MB) with
  ``_http.loads`` (number and depth checks) beside plain ``json.loads``.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rampart import _http
from rampart.embeddings.openai import OpenAIEmbedder
from rampart.llm import OpenAIBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import fake_openai as fake
from tests.fake_embeddings import FakeEmbeddings

MESSAGES = [{"role": "user", "content": "Write the changelog heading for 1.4.0"}]
TEXTS = [f"text number {i} about release notes and dates" for i in range(64)]


@pytest.fixture(scope="module")
def chat_server() -> Iterator[fake.FakeOpenAI]:
    with fake.FakeOpenAI(fake.scripted([("Release 1.4.0 (05.03.2025)", [])])) as server:
        yield server


@pytest.fixture(scope="module")
def embed_server() -> Iterator[FakeEmbeddings]:
    with FakeEmbeddings() as server:
        yield server


@pytest.mark.benchmark(group="http-chat")
def test_chat_bounded(benchmark: Any, chat_server: fake.FakeOpenAI) -> None:
    with OpenAIBackend(chat_server.base_url, "m", timeout=30) as backend:
        reply = benchmark(lambda: backend.chat(MESSAGES, temperature=0.0, seed=1, max_tokens=16))
    assert reply.text.startswith("Release")


@pytest.mark.benchmark(group="http-chat")
def test_chat_unbounded_http_client_baseline(benchmark: Any, chat_server: fake.FakeOpenAI) -> None:
    port = int(chat_server.base_url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = {"model": "m", "messages": MESSAGES, "temperature": 0.0, "seed": 1}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def call() -> Any:
        body = json.dumps({**payload, "max_tokens": 16}).encode()
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        return json.loads(conn.getresponse().read())

    try:
        answer = benchmark(call)
    finally:
        conn.close()
    assert answer["choices"][0]["message"]["content"].startswith("Release")


@pytest.mark.benchmark(group="http-embed")
def test_embed_bounded(benchmark: Any, embed_server: FakeEmbeddings) -> None:
    emb = OpenAIEmbedder(embed_server.base_url, "m", timeout=30)
    try:
        vectors = benchmark(lambda: emb.encode_batch(TEXTS))
    finally:
        emb.close()
    assert len(vectors) == 64


@pytest.mark.benchmark(group="http-embed")
def test_embed_unbounded_urllib_baseline(benchmark: Any, embed_server: FakeEmbeddings) -> None:
    url = embed_server.base_url + "/embeddings"

    def call() -> Any:
        data = json.dumps({"model": "m", "input": TEXTS, "encoding_format": "float"}).encode()
        req = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    answer = benchmark(call)
    assert len(answer["data"]) == 64


@pytest.fixture(scope="module")
def embeddings_body() -> bytes:
    rng = random.Random(7)
    data = [
        {"object": "embedding", "index": i, "embedding": [rng.uniform(-1, 1) for _ in range(1536)]}
        for i in range(64)
    ]
    return json.dumps({"object": "list", "data": data}).encode()


@pytest.mark.benchmark(group="http-json")
def test_loads_bounded(benchmark: Any, embeddings_body: bytes) -> None:
    answer = benchmark(lambda: _http.loads(embeddings_body, "http://bench"))
    assert len(answer["data"]) == 64


@pytest.mark.benchmark(group="http-json")
def test_loads_json_baseline(benchmark: Any, embeddings_body: bytes) -> None:
    answer = benchmark(lambda: json.loads(embeddings_body))
    assert len(answer["data"]) == 64
