"""A small OpenAI-compatible chat server on 127.0.0.1 for the probe tests.

Real HTTP (``ThreadingHTTPServer``, keep-alive), scripted answers: a behaviour is a
function of the request payload and its sequence number that returns
``(status, body, delay_s)``. The server records every payload and the most calls it
ever had in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Behaviour = Callable[[dict[str, Any], int], tuple[int, bytes, float]]

IDENTIFIER = "zorblax_refresh_v7"
TOOL = "zorblax_cache_rotate"
CONTEXT_HEAD = "Project instructions:\n\n"


# A tool call: a tool name (no arguments), or (name, arguments as a dict or raw text).
Call = str | tuple[str, Any]


def completion(text: str, payload: dict[str, Any], tool_calls: list[Call] | None = None) -> bytes:
    prompt_words = sum(len((m.get("content") or "").split()) for m in payload["messages"])
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = []
        for i, c in enumerate(tool_calls):
            name, args = (c, {}) if isinstance(c, str) else c
            raw = args if isinstance(args, str) else json.dumps(args)
            fn = {"name": name, "arguments": raw}
            message["tool_calls"].append({"id": f"call_{i}", "type": "function", "function": fn})
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1764547200,
            "model": payload.get("model") or "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_words,
                "completion_tokens": len(text.split()),
                "total_tokens": prompt_words + len(text.split()),
            },
        }
    ).encode()


def critical_index(payload: dict[str, Any]) -> int | None:
    """Which block of the context holds the identifier (blocks are separated by blank
    lines), or None when it is absent."""
    user = payload["messages"][-1]["content"]
    start = user.find(CONTEXT_HEAD)
    at = user.find(IDENTIFIER)
    if start < 0 or at < 0:
        return None
    return user[start + len(CONTEXT_HEAD) : at].count("\n\n")


def cliff(after: int, before: int) -> Behaviour:
    """Finds the identifier only when its block is early enough: within the first
    ``after`` blocks when the task follows the context, ``before`` when it precedes
    it (the paper's cliff, as a deterministic rule)."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        idx = critical_index(payload)
        user = payload["messages"][-1]["content"]
        task_first = not user.startswith(CONTEXT_HEAD)
        limit = before if task_first else after
        if idx is not None and idx < limit:
            return 200, completion(f"Call `{IDENTIFIER}()` to rotate it.", payload), 0.0
        return 200, completion("Delete the files in the cache folder.", payload), 0.0

    return answer


def tool_caller(native: bool) -> Behaviour:
    """Calls the target tool when its schema is in the prompt (or, with ``native``, in
    the request's ``tools``)."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        names = [t["function"]["name"] for t in payload.get("tools", [])]
        if native and TOOL in names:
            return 200, completion("", payload, [TOOL]), 0.0
        if TOOL in payload["messages"][-1]["content"]:
            text = json.dumps({"tool": TOOL, "arguments": {"region": "eu-west"}})
            return 200, completion(text, payload), 0.0
        return 200, completion("No tool can rotate the cache.", payload), 0.0

    return answer


# ---- scripted agents ----------------------------------------------------------------

# What a scripted model says: (text, tool calls), computed from the request payload.
Turn = Callable[[dict[str, Any]], tuple[str, list[Call]]]


def system_text(payload: dict[str, Any]) -> str:
    first = payload["messages"][0]
    return str(first.get("content") or "") if first["role"] == "system" else ""


def scripted(turns: list[Turn | tuple[str, list[Call]]]) -> Behaviour:
    """Answers the n-th request with ``turns[n]`` (the last one repeats): a fixed
    ``(text, tool_calls)`` or a function of the payload returning one."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        turn = turns[min(n, len(turns) - 1)]
        text, calls = turn(payload) if callable(turn) else turn
        return 200, completion(text, payload, calls), 0.0

    return answer


def convention_learner(rule: str, marker: str, good: str, bad: str) -> Behaviour:
    """A deterministic stand-in for a model learning a project convention it cannot
    guess: a diagnosis request (its system prompt asks for "one rule") is answered
    with ``rule``; a judge request with PASS/FAIL by whether ``marker`` is in the
    answer; any other request with ``good`` when ``marker`` appears in the compiled
    system prompt, else ``bad``."""

    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        system = system_text(payload)
        if "write one rule" in system:
            return 200, completion(rule, payload), 0.0
        if system.startswith("You grade"):
            verdict = "PASS" if marker in payload["messages"][-1]["content"] else "FAIL"
            return 200, completion(f"{verdict}: checked for {marker}", payload), 0.0
        return 200, completion(good if marker in system else bad, payload), 0.0

    return answer


def flaky(fail_first: int, then: Behaviour, status: int = 500) -> Behaviour:
    def answer(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        if n < fail_first:
            return status, b'{"error": {"message": "model overloaded"}}', 0.0
        return then(payload, n)

    return answer


def constant(status: int, body: bytes, delay: float = 0.0) -> Behaviour:
    return lambda payload, n: (status, body, delay)


class FakeOpenAI:
    """``with FakeOpenAI(behaviour) as server: server.base_url``."""

    def __init__(self, behaviour: Behaviour, *, delay: float = 0.0) -> None:
        self.behaviour = behaviour
        self.delay = delay
        self.payloads: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length))
                with fake._lock:
                    n = len(fake.payloads)
                    fake.payloads.append(payload)
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    if self.path != "/v1/chat/completions":
                        status, body, delay = 404, b'{"error": "no such route"}', 0.0
                    else:
                        status, body, delay = fake.behaviour(payload, n)
                    time.sleep(delay + fake.delay)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        # A short poll interval: shutdown() waits up to one interval, per server.
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def calls(self) -> int:
        return len(self.payloads)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reads_then_recalls(n_reads: int, recall_args: Any, answer: str) -> Behaviour:
    """A model that reads ``n_reads`` pages with ``read_page`` after the last user
    message (the pages named by that message's last word), then calls ``recall``
    with ``recall_args`` (a dict, or a function of the payload), then answers.
    Call ids are unique across the run (``call_<n>``), as frameworks need."""

    def respond(payload: dict[str, Any], n: int) -> tuple[int, bytes, float]:
        since: list[dict[str, Any]] = []
        prefix = ""
        for m in reversed(payload["messages"]):
            if m["role"] == "user":
                prefix = m["content"].split()[-1].strip(".")
                break
            since.append(m)
        done = [m for m in since if m["role"] == "tool"]
        calls: list[Call] | None
        if len(done) < n_reads:
            calls = [("read_page", {"path": f"{prefix}/{len(done)}"})]
        elif len(done) == n_reads:
            calls = [("recall", recall_args(payload) if callable(recall_args) else recall_args)]
        else:
            calls = None
        body = json.loads(completion("" if calls else answer, payload, calls))
        for c in body["choices"][0]["message"].get("tool_calls") or ():
            c["id"] = f"call_{n}"
        return 200, json.dumps(body).encode(), 0.0

    return respond
