"""A small OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 for the tests.

Real HTTP (``ThreadingHTTPServer``). Each text's vector is a hashed bag of its
words (stable across runs, so texts sharing words are near each other and a gate
built on it ranks for real). ``failures`` scripts answers that come before the
real ones: an HTTP status, or a ``(status, headers, body)`` triple; ``mangle``
rewrites a successful answer's JSON (to test the client's checks). Every request
body is recorded with its headers.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 256

Failure = int | tuple[int, dict[str, str], bytes]


def embed(text: str, dim: int = DIM) -> list[float]:
    vec = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vec[h[0] % dim] += 1.0 if h[1] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class FakeEmbeddings:
    def __init__(
        self,
        *,
        api_key: str | None = None,
        failures: list[Failure] | None = None,
        mangle: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.api_key = api_key
        self.failures = list(failures or [])
        self.mangle = mangle
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def error(self, status: int, message: str) -> None:
                body = {"error": {"message": message, "type": "invalid_request_error"}}
                self.send(status, json.dumps(body).encode())

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server._lock:
                    server.headers.append(dict(self.headers.items()))
                    try:
                        payload = json.loads(raw)
                    except ValueError:
                        payload = None
                    server.requests.append(payload)
                    failure = server.failures.pop(0) if server.failures else None
                if self.path != "/v1/embeddings":
                    return self.error(404, f"no route {self.path}")
                if failure is not None:
                    if isinstance(failure, int):
                        return self.error(failure, f"scripted failure {failure}")
                    status, headers, body = failure
                    return self.send(status, body, headers)
                if server.api_key is not None:
                    if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                        return self.error(401, "Incorrect API key provided")
                if not isinstance(payload, dict) or "input" not in payload:
                    return self.error(400, "missing 'input'")
                texts = payload["input"]
                texts = [texts] if isinstance(texts, str) else texts
                if any(not isinstance(t, str) or not t for t in texts):
                    return self.error(400, "'input' must hold non-empty strings")
                dim = payload.get("dimensions") or DIM
                answer: dict[str, Any] = {
                    "object": "list",
                    "model": payload.get("model"),
                    # Reversed on purpose: the client must order by "index".
                    "data": [
                        {"object": "embedding", "index": i, "embedding": embed(t, dim)}
                        for i, t in reversed(list(enumerate(texts)))
                    ],
                    "usage": {"prompt_tokens": sum(len(t.split()) for t in texts)},
                }
                if server.mangle is not None:
                    answer = server.mangle(answer)
                self.send(200, json.dumps(answer).encode())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        # A short poll keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FakeEmbeddings:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
