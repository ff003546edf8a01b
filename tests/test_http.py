"""The model clients against hostile HTTP servers (rampart._http, docs/limits.md).

Every server here is real: a TCP listener on 127.0.0.1 in a thread that writes
whatever bytes the case needs (an endless body, a drip, a reset, a redirect loop).
Each case runs the client call in a thread and joins it with a generous guard, so
a client that hangs fails the test instead of hanging it; nothing asserts how fast
a call was.
"""

from __future__ import annotations

import json
import pickle
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rampart import _http
from rampart.embeddings.openai import OpenAIEmbedder
from rampart.errors import InvalidArgumentError, ModelError
from rampart.llm import BackendError, OpenAIBackend

from tests import fake_openai as fake

# A hanging client fails the test after this long (a bound, not a speed claim:
# the calls below have deadlines of 1-2 s).
GUARD_S = 60.0

Handler = Callable[[socket.socket, threading.Event, int], None]


# A self-signed certificate for 127.0.0.1 made for these tests (tests/data/README.md).
CERT = Path(__file__).parent / "data" / "tls_localhost.pem"
KEY = Path(__file__).parent / "data" / "tls_localhost.key"


class RawServer:
    """A TCP server on 127.0.0.1 that hands each connection (and its number) to
    ``handler`` in its own thread; ``stop`` is set when the test ends, so endless
    handlers end too. ``tls``: the handler gets the connection after a TLS
    handshake with the test certificate."""

    def __init__(self, handler: Handler, *, tls: bool = False) -> None:
        self.handler = handler
        self._tls: ssl.SSLContext | None = None
        if tls:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(CERT, KEY)
        self.stop = threading.Event()
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self.port = self._sock.getsockname()[1]
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                n = self.connections
                self.connections += 1
                self._open.append(conn)
            t = threading.Thread(target=self._run, args=(conn, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, conn: socket.socket, n: int) -> None:
        with conn:
            conn.settimeout(GUARD_S)
            try:
                if self._tls is None:
                    self.handler(conn, self.stop, n)
                else:
                    with self._tls.wrap_socket(conn, server_side=True) as tls_conn:
                        self.handler(tls_conn, self.stop, n)
            except OSError:
                pass  # the client hung up (or refused the certificate): most cases expect it

    def __enter__(self) -> RawServer:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._accept.join(GUARD_S)
        self._sock.close()
        with self._lock:
            for conn in self._open:  # wake handlers blocked on a kept-alive connection
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in self._threads:
            t.join(GUARD_S)


def read_request(conn: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """One request: its request line, headers (lower-case names) and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    line, *rest = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in rest)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the client closed the connection")
        body += chunk
    return line, headers, body


def answer(status: str, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def respond(raw: bytes) -> Handler:
    """Read the request, write ``raw``, close."""

    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        conn.sendall(raw)

    return handler


def drip(head: bytes, then: bytes) -> Handler:
    """Read the request, write ``head``, then ``then`` one byte every 50 ms until the
    test ends (or the client hangs up)."""

    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        conn.sendall(head)
        i = 0
        while not stop.wait(0.05):
            conn.sendall(then[i % len(then) : i % len(then) + 1])
            i += 1

    return handler


def endless(head: bytes, piece: bytes) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        conn.sendall(head)
        while not stop.is_set():
            conn.sendall(piece)

    return handler


def completion(text: str = "ok", **usage: Any) -> bytes:
    body = json.loads(fake.completion(text, {"messages": [{"content": "a b"}]}))
    body["usage"].update(usage)
    return json.dumps(body).encode()


def embeddings(vectors: list[list[float]]) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return json.dumps({"object": "list", "data": data}).encode()


# ---- running a call under the guard -------------------------------------------------


def guarded(call: Callable[[], Any]) -> Any:
    """Run ``call`` in a thread; returns its result or the exception it raised, and
    fails the test if it is still running after GUARD_S."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", call()))
        except BaseException as exc:  # the test inspects it
            out.append(("raised", exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(GUARD_S)
    assert not t.is_alive(), f"the call did not return within the {GUARD_S:g} s guard"
    return out[0][1]


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for c in clients:
        c.close()


def chat(url: str, opened: list[Any], **kw: Any) -> Any:
    kw.setdefault("timeout", 2.0)
    backend = OpenAIBackend(url, "m", **kw)
    opened.append(backend)
    messages = [{"role": "user", "content": "hi"}]
    return guarded(lambda: backend.chat(messages, temperature=0.0, seed=1, max_tokens=8))


def embed(url: str, opened: list[Any], **kw: Any) -> Any:
    kw.setdefault("timeout", 2.0)
    kw.setdefault("backoff", 0.0)
    emb = OpenAIEmbedder(url, "m", **kw)
    opened.append(emb)
    return guarded(lambda: emb.encode_batch(["one", "two"]))


CLIENTS = {"chat": (chat, BackendError), "embed": (embed, ModelError)}


def failure_of(
    kind: str, handler: Handler, opened: list[Any], *, tls: bool = False, **kw: Any
) -> Any:
    """The typed error ``kind``'s client raised against ``handler``."""
    call, error = CLIENTS[kind]
    with RawServer(handler, tls=tls) as server:
        result = call(server.base_url, opened, **kw)
    assert isinstance(result, error), f"expected {error.__name__}, got {result!r}"
    assert f"127.0.0.1:{server.port}/v1/" in str(result)  # names the URL
    return result


both = pytest.mark.parametrize("kind", sorted(CLIENTS))


# ---- size ---------------------------------------------------------------------------


@both
def test_an_endless_body_stops_at_the_size_cap(kind: str, opened: list[Any]) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    err = failure_of(kind, endless(head, b"[" * 65536), opened, max_body=1 << 20, timeout=30)
    assert "longer than 1048576 bytes (max_body is 1048576 bytes)" in str(err) and not err.retryable


@both
def test_an_endless_chunked_body_stops_at_the_size_cap(kind: str, opened: list[Any]) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    err = failure_of(kind, endless(head, piece), opened, max_body=1 << 20, timeout=30)
    assert "longer than 1048576 bytes" in str(err) and not err.retryable


def test_the_default_cap_holds_against_an_endless_body(opened: list[Any]) -> None:
    head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
    err = failure_of("chat", endless(head, b"x" * 65536), opened, timeout=30)
    assert f"(max_body is {16 << 20} bytes)" in str(err)


@both
def test_a_huge_content_length_is_refused_before_reading(kind: str, opened: list[Any]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{"
    err = failure_of(kind, respond(raw), opened)
    assert "announces 1000000000000 bytes" in str(err)


# ---- time ---------------------------------------------------------------------------


@both
def test_a_byte_drip_body_is_bounded_by_the_call_deadline(kind: str, opened: list[Any]) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
    err = failure_of(kind, drip(head, b" "), opened, timeout=1.0)
    assert "no answer within 1 s" in str(err) and err.retryable


@both
def test_slow_headers_are_bounded_by_the_call_deadline(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, drip(b"HTTP/1.1 200 OK\r\n", b"X-Slow: y\r\n"), opened, timeout=1.0)
    assert "no answer within 1 s" in str(err)


@both
def test_a_silent_server_is_bounded_by_the_call_deadline(kind: str, opened: list[Any]) -> None:
    def silent(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        stop.wait(GUARD_S)

    err = failure_of(kind, silent, opened, timeout=1.0, max_retries=3)
    assert "no answer within 1 s" in str(err)


@both
def test_retry_after_beyond_the_deadline_fails_at_once(kind: str, opened: list[Any]) -> None:
    raw = answer(
        "429 Too Many Requests", b'{"error": {"message": "slow down"}}', "Retry-After: 3600"
    )
    calls: list[int] = []

    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        while True:
            read_request(conn)
            calls.append(n)
            conn.sendall(raw)

    err = failure_of(kind, handler, opened, timeout=2.0, max_retries=3)
    assert "429" in str(err) and "slow down" in str(err) and err.retryable
    assert "no time for try 2" in str(err) and len(calls) == 1
    if kind == "chat":
        assert err.retry_after == 3600 and err.status == 429


@both
def test_retry_after_within_the_deadline_is_honoured(kind: str, opened: list[Any]) -> None:
    good = answer(
        "200 OK", completion() if kind == "chat" else embeddings([[1.0, 0.0], [0.0, 1.0]])
    )
    busy = answer("503 Service Unavailable", b"busy", "Retry-After: 0")

    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        conn.sendall(busy if n == 0 else good)

    call, _ = CLIENTS[kind]
    with RawServer(handler) as server:
        result = call(server.base_url, opened, timeout=10.0, max_retries=1)
        assert server.connections == 2
    if kind == "chat":
        assert result.text == "ok"
    else:
        assert result == [[1.0, 0.0], [0.0, 1.0]]


def test_retry_after_as_an_http_date() -> None:
    assert _http.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert _http.parse_retry_after("Fri, 01 Jan 9999 00:00:00 GMT") > 1e9  # type: ignore[operator]
    for bad in ("soon", "-3", "nan", "inf", "1e999", ""):
        assert _http.parse_retry_after(bad) is None


# ---- JSON ---------------------------------------------------------------------------


@both
@pytest.mark.parametrize("depth", [65, 1_000_000])
def test_deep_json_is_refused_without_recursion_error(
    kind: str, depth: int, opened: list[Any]
) -> None:
    body = b'{"data": ' + b"[" * depth + b"]" * depth + b"}"
    err = failure_of(kind, respond(answer("200 OK", body)), opened, max_body=4 << 20)
    assert "nests JSON deeper than 64 levels" in str(err)


@both
@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_tokens_are_refused(kind: str, token: bytes, opened: list[Any]) -> None:
    body = b'{"choices": [], "data": [{"index": 0, "embedding": [' + token + b"]}]}"
    err = failure_of(kind, respond(answer("200 OK", body)), opened)
    assert f"holds {token.decode()}: a number that is not finite" in str(err)


@both
def test_huge_integers_are_refused(kind: str, opened: list[Any]) -> None:
    body = b'{"choices": [], "data": [{"index": 0, "embedding": [1' + b"0" * 5000 + b"]}]}"
    err = failure_of(kind, respond(answer("200 OK", body)), opened)
    assert "an integer of 5001 characters" in str(err)


@pytest.mark.parametrize("value", ["1e999", "-1e999", "1e300", "[1.0]", "true", '"1"'])
def test_embeddings_refuse_numbers_out_of_range(value: str, opened: list[Any]) -> None:
    rows = f'{{"index": 0, "embedding": [0.5, {value}]}}, {{"index": 1, "embedding": [0.5, 0.5]}}'
    body = f'{{"data": [{rows}]}}'
    err = failure_of("embed", respond(answer("200 OK", body.encode())), opened)
    assert "not finite" in str(err) or "non-numbers" in str(err)


def test_insane_token_counts_are_unknown(opened: list[Any]) -> None:
    for usage in (
        {"prompt_tokens": -5, "completion_tokens": 2**40},
        {"prompt_tokens": 1e308, "completion_tokens": True},
    ):
        with RawServer(respond(answer("200 OK", completion(**usage)))) as server:
            reply = chat(server.base_url, opened)
        assert reply.text == "ok" and reply.prompt_tokens is None
        assert reply.completion_tokens is None


def test_lone_surrogates_become_replacement_characters(opened: list[Any]) -> None:
    body = completion("x\\ud800y").replace(b"x\\\\ud800y", b"x\\ud800y")
    with RawServer(respond(answer("200 OK", body))) as server:
        reply = chat(server.base_url, opened)
    assert reply.text == "x\ufffdy"
    reply.text.encode("utf-8")


@both
def test_invalid_utf8_is_refused(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, respond(answer("200 OK", b'{"x": "\xff\xfe"}')), opened)
    assert "invalid UTF-8 at byte 7" in str(err)


@both
def test_a_body_that_is_not_json(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, respond(answer("200 OK", b"<html>proxy</html>")), opened)
    assert "not JSON" in str(err) and "<html>proxy" in str(err)


# ---- broken transport ---------------------------------------------------------------


@both
def test_truncated_chunked_encoding(kind: str, opened: list[Any]) -> None:
    raw = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n{"data": ['
    err = failure_of(kind, respond(raw), opened)
    assert "cut off" in str(err) and err.retryable


@both
def test_a_body_shorter_than_its_content_length(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, respond(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}"), opened)
    assert "cut off after 2 bytes" in str(err) and err.retryable


@both
def test_a_bad_chunk_size(kind: str, opened: list[Any]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    err = failure_of(kind, respond(raw), opened)
    assert err.retryable


@both
def test_connection_reset(kind: str, opened: list[Any]) -> None:
    def reset(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    err = failure_of(kind, reset, opened, max_retries=0)
    assert "Connection" in str(err) and err.retryable


@both
def test_garbage_instead_of_a_status_line(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, respond(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), opened)
    assert "malformed HTTP answer" in str(err)


@both
def test_too_many_headers(kind: str, opened: list[Any]) -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"Content-Length: 2\r\n\r\n{}"
    err = failure_of(kind, respond(raw), opened)
    assert "malformed HTTP answer" in str(err)


# ---- redirects ----------------------------------------------------------------------


@both
def test_a_redirect_loop_ends(kind: str, opened: list[Any]) -> None:
    def loop(conn: socket.socket, stop: threading.Event, n: int) -> None:
        while True:
            line, _, _ = read_request(conn)
            path = line.split()[1]
            conn.sendall(answer("307 Temporary Redirect", b"", f"Location: {path}"))

    err = failure_of(kind, loop, opened)
    assert f"more than {_http.MAX_REDIRECTS} redirects" in str(err) and not err.retryable


@both
def test_a_redirect_to_another_origin_is_refused(kind: str, opened: list[Any]) -> None:
    raw = answer("308 Permanent Redirect", b"", "Location: http://198.51.100.7/v1/x")
    err = failure_of(kind, respond(raw), opened)
    assert "redirected to http://198.51.100.7/v1/x" in str(err) and not err.retryable


def test_a_same_origin_307_is_followed(opened: list[Any]) -> None:
    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        line, _, body = read_request(conn)
        if line.split()[1] == "/v1/chat/completions":
            conn.sendall(answer("307 Temporary Redirect", b"", "Location: /v2/chat/completions"))
            line, _, body = read_request(conn)
        assert line.split()[1] == "/v2/chat/completions" and json.loads(body)["model"] == "m"
        conn.sendall(answer("200 OK", completion("moved")))

    with RawServer(handler) as server:
        assert chat(server.base_url, opened).text == "moved"


# ---- connections --------------------------------------------------------------------


def test_a_stale_keep_alive_connection_is_replaced(opened: list[Any]) -> None:
    def once(conn: socket.socket, stop: threading.Event, n: int) -> None:
        read_request(conn)
        conn.sendall(answer("200 OK", completion(f"call {n}")))
        # ...and close, although the answer promised keep-alive.

    with RawServer(once) as server:
        backend = OpenAIBackend(server.base_url, "m", timeout=5.0)
        opened.append(backend)
        messages = [{"role": "user", "content": "hi"}]
        texts = [
            guarded(lambda: backend.chat(messages, temperature=0.0, seed=1, max_tokens=8)).text
            for _ in range(3)
        ]
    assert texts == ["call 0", "call 1", "call 2"]


def test_keep_alive_connections_are_reused(opened: list[Any]) -> None:
    with fake.FakeOpenAI(fake.constant(200, completion())) as server:
        backend = OpenAIBackend(server.base_url, "m", timeout=5.0)
        opened.append(backend)
        for _ in range(3):
            backend.chat([{"role": "user", "content": "hi"}], temperature=0, seed=1, max_tokens=8)
        assert len(backend._client._idle) == 1  # one connection served all three


def test_bad_arguments_are_refused_at_construction() -> None:
    for kw in ({"timeout": 0}, {"timeout": float("inf")}, {"max_body": 0}, {"max_retries": -1}):
        with pytest.raises(InvalidArgumentError):
            OpenAIBackend("http://127.0.0.1:1/v1", "m", **kw)
    with pytest.raises(InvalidArgumentError, match="line break"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", api_key="sk\r\nX-Evil: 1")
    with pytest.raises(InvalidArgumentError, match="base_url"):
        OpenAIBackend("http://127.0.0.1:notaport/v1", "m")
    for kw in ({"max_body": 0}, {"timeout": float("nan")}, {"headers": {"X": "\u2603"}}):
        with pytest.raises(InvalidArgumentError, match="OpenAIEmbedder"):
            OpenAIEmbedder("http://127.0.0.1:1/v1", "m", **kw)


def test_an_embedder_survives_pickling(opened: list[Any]) -> None:
    body = answer("200 OK", embeddings([[1.0, 0.0], [0.0, 1.0]]))

    def handler(conn: socket.socket, stop: threading.Event, n: int) -> None:
        while True:
            read_request(conn)
            conn.sendall(body)

    with RawServer(handler) as server:
        emb = OpenAIEmbedder(server.base_url, "m", timeout=5.0)
        opened.append(emb)
        assert emb.encode_batch(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]
        copy = pickle.loads(pickle.dumps(emb))  # with an idle connection in its pool
        opened.append(copy)
        assert guarded(lambda: copy.encode_batch(["a", "b"])) == [[1.0, 0.0], [0.0, 1.0]]
        assert copy.requests == 2 and copy.max_body == emb.max_body


# ---- TLS ----------------------------------------------------------------------------


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenSSL reads SSL_CERT_FILE when the client's default context is made.
    monkeypatch.setenv("SSL_CERT_FILE", str(CERT))


@both
def test_tls_answers_are_read(kind: str, opened: list[Any], trusted: None) -> None:
    good = completion("secure") if kind == "chat" else embeddings([[1.0, 0.0], [0.0, 1.0]])
    call, _ = CLIENTS[kind]
    with RawServer(respond(answer("200 OK", good)), tls=True) as server:
        result = call(server.base_url, opened)
    assert result.text == "secure" if kind == "chat" else result == [[1.0, 0.0], [0.0, 1.0]]


@both
def test_a_tls_drip_is_bounded_by_the_call_deadline(
    kind: str, opened: list[Any], trusted: None
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
    err = failure_of(kind, drip(head, b" "), opened, tls=True, timeout=1.0)
    assert "no answer within 1 s" in str(err)


@both
def test_a_handshake_that_never_ends_is_bounded(kind: str, opened: list[Any]) -> None:
    def silent(conn: socket.socket, stop: threading.Event, n: int) -> None:
        stop.wait(GUARD_S)  # TCP accepted, not a byte of TLS

    call, error = CLIENTS[kind]
    with RawServer(silent) as server:
        err = call(server.base_url.replace("http:", "https:"), opened, timeout=1.0)
    assert isinstance(err, error) and "no answer within 1 s" in str(err)


@both
def test_an_untrusted_certificate_is_not_retried(kind: str, opened: list[Any]) -> None:
    err = failure_of(kind, respond(b""), opened, tls=True, max_retries=3)
    assert "certificate" in str(err) and not err.retryable


def test_a_huge_timeout_is_clamped_not_an_overflow(opened: list[Any]) -> None:
    raw = answer("429 Too Many Requests", b"{}", "Retry-After: 1e300")
    err = failure_of("chat", respond(raw), opened, timeout=1e300, max_retries=1)
    assert "HTTP 429" in str(err) and err.retry_after == 1e300
    with RawServer(respond(answer("200 OK", completion("late")))) as server:
        assert chat(server.base_url, opened, timeout=1e300).text == "late"
