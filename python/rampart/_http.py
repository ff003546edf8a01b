"""Bounded HTTP for the model clients (:class:`rampart.llm.OpenAIBackend`,
:class:`rampart.embeddings.openai.OpenAIEmbedder`).

The server at the other end is untrusted input like any file: it may answer
forever, drip a byte a second, nest JSON a million levels deep, send ``NaN`` or a
10 000-digit number, reset the connection half-way or redirect in a circle. Each
call here is bounded in

- **time**: one deadline for the whole call (connect, TLS handshake, sending,
  status line and headers, body, every retry and every wait between them). Every
  socket operation gets the time *left*, not a fresh per-operation timeout, so a
  server dripping a byte a second cannot stretch a 2 s call; name resolution
  (``getaddrinfo``) is the one step that cannot be interrupted (the system
  resolver has its own timeouts).
- **memory**: a body-size cap, checked against ``Content-Length`` before reading
  and against the bytes read so far while reading (chunked and close-delimited
  bodies too); headers are bounded by ``http.client`` (64 KiB a line, 100 lines).
- **recursion**: JSON nesting is bounded twice — by :mod:`json`'s own recursion
  guard while parsing (a ``RecursionError`` there is caught, however deep the
  text), then to :data:`MAX_JSON_DEPTH` by an iterative walk, so code that later
  recurses over the answer (``json.dumps`` of tool arguments, ``repr``) is safe.
- **numbers**: ``NaN``/``Infinity`` tokens and integers longer than
  :data:`MAX_INT_DIGITS` characters are refused while parsing; floats that
  overflow to infinity (``1e999``) are left to the callers, which check every
  number they use with :func:`math.isfinite` (a parse-time check on each float
  doubled the parse time of an embeddings answer: 109 ms → 203 ms for 64 × 1536
  floats).

Every failure is one :class:`HTTPFailure` naming the URL, which the clients turn
into their own typed error (``BackendError``, ``ModelError``) with ``retryable``.

Why the standard library and not urllib3/httpx: neither bounds a whole call
(their read timeouts are per socket operation, exactly the drip problem), so a
deadline would have to be built on top of them anyway; ``http.client`` gives
keep-alive and header parsing, and this module adds the deadline by handing
every read the time left.
"""

from __future__ import annotations

import email.utils
import http.client
import io
import json
import math
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_REDIRECTS",
    "Deadline",
    "HTTPFailure",
    "JSONClient",
    "check_header",
    "loads",
    "loads_text",
    "within_depth",
]

#: Deepest JSON nesting accepted in an answer. OpenAI-shaped answers nest 5 levels;
#: tool-call arguments travel as a JSON *string*, so they do not count here.
MAX_JSON_DEPTH = 64
#: Longest integer token accepted (sign included): 20 characters hold every int64.
#: Python refuses ints over 4 300 digits with a ValueError of its own, and an int
#: beyond 2**1024 raises OverflowError when turned into a float.
MAX_INT_DIGITS = 20
#: Same-origin 307/308 redirects followed per call; more is a loop.
MAX_REDIRECTS = 5
#: How much of an error answer is read for its message.
ERROR_BODY_BYTES = 64 << 10

# Statuses worth another try: the request was fine, the server was busy or broken.
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_READ_CHUNK = 64 << 10
# How much of a body goes into a message: enough for the server's reason.
_SNIPPET = 200


class HTTPFailure(Exception):
    """One failed call: what happened (``reason``), at which ``url``, whether another
    try could succeed (``retryable``), the HTTP ``status`` when one came, the
    server's own message (``detail``), its ``Retry-After`` in seconds and how many
    requests the call made (``attempts``). ``kind`` is one of ``"timeout"``,
    ``"connection"``, ``"tls"``, ``"status"``, ``"redirect"``, ``"too-large"``,
    ``"body"``."""

    def __init__(
        self,
        url: str,
        reason: str,
        *,
        kind: str,
        retryable: bool,
        status: int | None = None,
        detail: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.detail = detail
        self.retry_after = retry_after
        self.attempts = 1
        self.note = ""  # why no further try was made, when that is not obvious


class Deadline:
    """The end of one call on the monotonic clock."""

    __slots__ = ("end", "seconds")

    #: Longest deadline honoured (about three years): socket timeouts and sleeps
    #: beyond ~292 years raise OverflowError, so a huge ``timeout`` is clamped.
    LONGEST = 1e8

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + min(seconds, self.LONGEST)

    def left(self) -> float:
        """Seconds left; raises TimeoutError when none are (the caller's handler
        turns it into a ``"timeout"`` failure)."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


# ---- JSON -------------------------------------------------------------------------


class _NumberRefused(Exception):
    pass


def _refuse_constant(token: str) -> Any:
    raise _NumberRefused(f"the answer holds {token}: a number that is not finite")


def _bounded_int(token: str) -> int:
    if len(token) > MAX_INT_DIGITS:
        raise _NumberRefused(
            f"the answer holds an integer of {len(token)} characters "
            f"(at most {MAX_INT_DIGITS} accepted)"
        )
    return int(token)


def _depth_within(obj: Any, limit: int) -> bool:
    # Iterative on purpose: the object may be nested almost to the recursion limit.
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        children = node.values() if type(node) is dict else node
        kinds = set(map(type, children))  # one C pass: a vector of floats ends here
        if dict in kinds or list in kinds:
            for child in children:
                kind = type(child)
                if kind is dict or kind is list:
                    stack.append((child, depth + 1))
    return True


def loads(raw: bytes, url: str) -> Any:
    """Parse a JSON answer under the module's bounds; an :class:`HTTPFailure` of
    kind ``"body"`` (retryable: a proxy's half answer may not repeat) otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPFailure(
            url,
            f"the answer is not JSON: invalid UTF-8 at byte {exc.start}",
            kind="body",
            retryable=True,
        ) from None
    try:
        value = json.loads(
            text.removeprefix("\ufeff"),
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
        )
    except _NumberRefused as exc:
        raise HTTPFailure(url, str(exc), kind="body", retryable=True) from None
    except RecursionError:
        value = None
        deep = True
    except ValueError as exc:
        raise HTTPFailure(
            url,
            f"the answer is not JSON ({exc}): {snippet(raw)!r}",
            kind="body",
            retryable=True,
        ) from None
    else:
        deep = not within_depth(value)
    if deep:
        raise HTTPFailure(
            url,
            f"the answer nests JSON deeper than {MAX_JSON_DEPTH} levels",
            kind="body",
            retryable=True,
        )
    return value


def within_depth(value: Any) -> bool:
    """Whether parsed JSON nests at most :data:`MAX_JSON_DEPTH` levels."""
    return type(value) not in (dict, list) or _depth_within(value, MAX_JSON_DEPTH)


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"{token} overflows to infinity, which is not a JSON number")
    return value


def _not_a_number(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def loads_text(text: str) -> Any:
    """JSON a model wrote inside its answer (tool-call arguments travel as a JSON
    *string*, and text-mode models write calls into their prose), under the same
    nesting bound as an answer: ``ValueError`` when it is not JSON or nests deeper
    than :data:`MAX_JSON_DEPTH` — never a ``RecursionError``, however deep.
    ``NaN``/``Infinity`` tokens and floats that overflow to infinity (``1e999``)
    are not JSON either (a tool would be handed a NaN, and the value could not be
    sent on to any provider); other numbers are left to a tool's own checks."""
    try:
        value = json.loads(text, parse_constant=_not_a_number, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"it nests deeper than {MAX_JSON_DEPTH} levels") from None
    if not within_depth(value):
        raise ValueError(f"it nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def snippet(raw: bytes, n: int = _SNIPPET) -> str:
    """The start of a body, as text, for a message."""
    return raw[:n].decode("utf-8", "replace")


def _error_detail(raw: bytes, url: str) -> str:
    # OpenAI-style {"error": {"message": ...}} or {"error": "..."}; else the text.
    try:
        payload = loads(raw, url)
    except HTTPFailure:
        payload = None
    if isinstance(payload, dict):
        err = payload.get("error", payload.get("detail"))
        msg = err.get("message") if isinstance(err, dict) else err
        if isinstance(msg, str) and msg:
            return msg[: ERROR_BODY_BYTES // 4]
    return snippet(raw, 300).strip()


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delay-seconds or an HTTP date);
    ``None`` when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
        seconds = max(seconds, 0.0)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def check_header(name: str, value: str) -> str | None:
    """Why a header cannot be sent (``None`` when it can): http.client refuses
    control characters and anything outside Latin-1 only when the request is
    made, which would make a bad API key look like a broken connection."""
    for part, what in ((name, "name"), (value, "value")):
        if not isinstance(part, str):
            return f"header {name!r}: the {what} must be a str"
        try:
            part.encode("latin-1")
        except UnicodeEncodeError:
            return f"header {name!r}: the {what} holds characters outside Latin-1"
        if any(c in part for c in "\r\n\0"):
            return f"header {name!r}: the {what} holds a line break or NUL"
    return None


# ---- connections ------------------------------------------------------------------


class _DeadlineReader(io.RawIOBase):
    """The response side of a socket: every read waits at most the time left."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # keeps the fd open while read
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.left())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: Deadline, **kw: Any) -> None:
        super().__init__(sock, *args, **kw)
        self.fp.close()
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class _Connection(http.client.HTTPConnection):
    deadline: Deadline

    def connect(self) -> None:
        self.timeout = self.deadline.left()
        super().connect()

    def getresponse(self) -> http.client.HTTPResponse:
        deadline = self.deadline

        def build(sock: socket.socket, *args: Any, **kw: Any) -> _Response:
            return _Response(sock, *args, deadline=deadline, **kw)

        self.response_class = build  # type: ignore[assignment]
        return super().getresponse()


class _TLSConnection(_Connection, http.client.HTTPSConnection):
    def connect(self) -> None:
        # HTTPSConnection.connect, with the handshake given the time left rather
        # than a second full timeout (no proxy tunnels: the clients use none).
        self.timeout = self.deadline.left()
        http.client.HTTPConnection.connect(self)
        self.sock.settimeout(self.deadline.left())
        self.sock = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=self.host
        )


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int | None


def _origin(url: str) -> _Origin:
    parts = urlsplit(url)
    return _Origin(parts.scheme, parts.hostname or "", parts.port)


class JSONClient:
    """POSTs JSON to one origin and reads JSON back, bounded (see the module).

    Idle keep-alive connections are kept for the next call (whichever thread makes
    it), so a call costs one request, not a TCP handshake; a connection inherited
    across ``fork()`` is never reused. ``requests`` counts the HTTP requests sent.
    """

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        _ = parts.port  # raises ValueError for a port that is not a number
        self.base_url = base_url.rstrip("/")
        self._origin = _origin(base_url)
        self._prefix = parts.path.rstrip("/")
        self._idle: list[_Connection] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self.requests = 0

    # Picklable (an embedder travels to worker processes): connections stay behind.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_idle=[], _context=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # ---- pool ----

    def _take(self) -> tuple[_Connection, bool]:
        inherited: list[_Connection] = []
        with self._lock:
            if self._pid != os.getpid():
                # A child must not read answers meant for its parent's requests.
                # Closing the child's copies of the descriptors sends nothing:
                # the parent's connections stay open.
                inherited, self._idle, self._pid = self._idle, [], os.getpid()
            reused = self._idle.pop() if self._idle else None
        for conn in inherited:
            conn.close()
        if reused is not None:
            return reused, True
        o = self._origin
        if o.scheme == "https":
            if self._context is None:
                self._context = ssl.create_default_context()
            return _TLSConnection(o.host, o.port, context=self._context), False
        return _Connection(o.host, o.port), False

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections (a later call opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # ---- calls ----

    def post(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        timeout: float,
        max_body: int,
        retries: int = 0,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
    ) -> Any:
        """POST ``body`` to ``base_url + path`` and return the parsed JSON of a 2xx
        answer, all within ``timeout`` seconds; raises :class:`HTTPFailure`.

        Connection failures and the statuses in :data:`RETRY_STATUS` are tried
        again up to ``retries`` times (a timeout is not: it used the deadline):
        after the server's ``Retry-After`` when it sends one, else after
        ``backoff * 2**n`` seconds (at most ``max_backoff``, with jitter so
        concurrent callers spread out). A wait that would end past the deadline
        is not started: the call fails at once with the last failure (its
        ``retry_after`` tells the caller when to come back)."""
        deadline = Deadline(timeout)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._call(path, body, headers, deadline, max_body)
            except HTTPFailure as failure:
                failure.attempts = attempt
                # A timeout used the whole deadline: nothing is left for a retry.
                again = failure.retryable and failure.kind in ("connection", "status")
                if not again or attempt > retries:
                    raise
                if failure.retry_after is not None:
                    wait = failure.retry_after
                else:
                    wait = min(backoff * 2 ** (attempt - 1), max_backoff)
                    wait *= 0.5 + random.random() / 2
                if wait >= _time_left(deadline):
                    failure.note = (
                        f" (no time for try {attempt + 1}: it would start in {wait:g} s,"
                        f" after the {timeout:g} s deadline)"
                    )
                    failure.args = (f"{failure.url}: {failure.reason}{failure.note}",)
                    raise
                time.sleep(wait)

    def _call(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: Deadline,
        max_body: int,
    ) -> Any:
        target = self._prefix + path
        for _hop in range(MAX_REDIRECTS + 1):
            url = self._url(target)
            status, response_headers, raw = self._exchange(
                target, body, headers, deadline, max_body, url
            )
            if 200 <= status < 300:
                return loads(raw, url)
            if status in _REDIRECT_STATUS:
                target = self._redirect_target(url, status, response_headers.get("Location"))
                continue
            detail = _error_detail(raw, url)
            raise HTTPFailure(
                url,
                f"HTTP {status}: {detail}",
                kind="status",
                retryable=status in RETRY_STATUS,
                status=status,
                detail=detail,
                retry_after=parse_retry_after(response_headers.get("Retry-After")),
            )
        raise HTTPFailure(
            self._url(self._prefix + path),
            f"more than {MAX_REDIRECTS} redirects (a loop?); last to {self._url(target)}",
            kind="redirect",
            retryable=False,
        )

    def _url(self, target: str) -> str:
        o = self._origin
        port = f":{o.port}" if o.port is not None else ""
        host = f"[{o.host}]" if ":" in o.host else o.host
        return f"{o.scheme}://{host}{port}{target}"

    def _redirect_target(self, url: str, status: int, location: str | None) -> str:
        # Only 307/308 keep the method and body; 301/302/303 would turn the POST
        # into a GET. Another origin would receive the API key: refused too.
        if location is None:
            raise HTTPFailure(
                url, f"HTTP {status} without a Location", kind="redirect", retryable=False
            )
        dest = urljoin(url, location)
        parts = urlsplit(dest)
        if status not in (307, 308) or _origin(dest) != self._origin:
            raise HTTPFailure(
                url,
                f"HTTP {status}: redirected to {dest}; set the base URL to where the API "
                "is (only same-origin 307/308 redirects are followed)",
                kind="redirect",
                retryable=False,
                status=status,
            )
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def _exchange(
        self,
        target: str,
        body: bytes,
        headers: Mapping[str, str],
        deadline: Deadline,
        max_body: int,
        url: str,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request and its answer: (status, headers, body — all of a 2xx body,
        at most ERROR_BODY_BYTES of any other)."""
        while True:
            conn, reused = self._take()
            conn.deadline = deadline
            answered = False
            resp: http.client.HTTPResponse | None = None
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(deadline.left())
                with self._lock:
                    self.requests += 1
                conn.request("POST", target, body=body, headers=dict(headers))
                resp = conn.getresponse()
                answered = True
                ok = 200 <= resp.status < 300
                if ok and resp.length is not None and resp.length > max_body:
                    raise _too_large(url, max_body, f"announces {resp.length} bytes")
                raw = _read_body(resp, max_body if ok else ERROR_BODY_BYTES, url, strict=ok)
            except HTTPFailure:
                _discard(conn, resp)
                raise
            except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
                _discard(conn, resp)
                if reused and not answered:
                    # The server closed an idle keep-alive connection before this
                    # request reached it: a fresh connection, not a failure.
                    continue
                raise _transport_failure(url, exc, deadline) from None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                _discard(conn, resp)
                raise _transport_failure(url, exc, deadline) from None
            if resp.isclosed() and not resp.will_close:
                self._give_back(conn)  # the whole body was read: reusable
            else:
                _discard(conn, resp)
            return resp.status, resp.headers, raw


def _discard(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse | None) -> None:
    # The response holds the socket open (its reader keeps a reference): close both.
    if resp is not None:
        resp.close()
    conn.close()


def _time_left(deadline: Deadline) -> float:
    """Seconds left, 0 when the deadline has passed."""
    return max(deadline.end - time.monotonic(), 0.0)


def _too_large(url: str, max_body: int, what: str) -> HTTPFailure:
    return HTTPFailure(
        url,
        f"the answer {what} (max_body is {max_body} bytes)",
        kind="too-large",
        retryable=False,
    )


def _read_body(resp: http.client.HTTPResponse, limit: int, url: str, *, strict: bool) -> bytes:
    """At most ``limit`` bytes of the body. ``strict``: one byte more is a failure
    (a success body must be whole); otherwise the rest is left unread (an error
    body is only read for its message)."""
    parts: list[bytes] = []
    got = 0
    announced = resp.length  # None when chunked or delimited by the close
    while True:
        piece = resp.read(min(_READ_CHUNK, limit + 1 - got))
        if not piece:
            if announced is not None and got < announced:
                # http.client returns a short body at EOF without complaint.
                raise http.client.IncompleteRead(b"".join(parts), announced - got)
            return b"".join(parts)
        parts.append(piece)
        got += len(piece)
        if got > limit:
            if strict:
                raise _too_large(url, limit, f"is longer than {limit} bytes")
            return b"".join(parts)[:limit]


def _transport_failure(url: str, exc: BaseException, deadline: Deadline) -> HTTPFailure:
    if isinstance(exc, TimeoutError) or deadline.end <= time.monotonic():
        return HTTPFailure(
            url, f"no answer within {deadline.seconds:g} s", kind="timeout", retryable=True
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        # The same certificate will be refused again: not worth a retry.
        return HTTPFailure(url, f"TLS: {exc.verify_message}", kind="tls", retryable=False)
    if isinstance(exc, http.client.IncompleteRead):
        reason = f"the answer was cut off after {len(exc.partial)} bytes"
    elif isinstance(exc, http.client.RemoteDisconnected):
        reason = f"RemoteDisconnected: {exc} (the server closed the connection)"
    elif isinstance(exc, (http.client.HTTPException, ValueError)):
        reason = f"malformed HTTP answer ({type(exc).__name__}: {exc})"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    return HTTPFailure(url, reason, kind="connection", retryable=True)
