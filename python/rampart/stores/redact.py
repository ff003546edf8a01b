"""One redaction for every secret a store URL can carry, applied to every message,
repr, log record and command-line line that could quote one (docs/shared.md,
"Secrets").

A store URL holds credentials in several forms, and drivers quote them back in
others, so masking only the URL's user part (``scheme://user:***@host``) is not
enough:

- the user part: ``redis://:pw@host``, ``postgresql://user:pw@host/db``,
  ``redis+sentinel://user:pw@h1:p1,h2:p2/master``;
- query parameters: ``?password=…``, ``?sentinel_password=…``, libpq's
  ``sslpassword``; any key that names a password;
- libpq key=value strings (what a driver builds from the URL and may quote):
  ``host=h password=pw``, ``password = 'p w\\'d'``, and ``'password': 'pw'`` in
  a repr'd dict of keyword arguments.

:func:`redacted` masks each of those forms structurally, and besides replaces
every secret :func:`remember` has seen in a store URL of this process wherever it
appears, in whatever surrounding text (a driver's error that quotes a value
unparsed, a password with a quote or space in it that no pattern delimits). A
secret shorter than ``_LITERAL_MIN`` characters is masked only in the structural
forms: replacing "ab" everywhere would garble every message.

Drivers log on their own: psycopg, psycopg.pool and redis-py. :func:`guard_loggers`
puts :class:`RedactingFilter` on each of their loggers (and rampart's), so a record
is redacted before any handler sees it, whatever the application's logging
configuration. A filter on a logger applies to the records logged on that very
logger (not its children), hence one filter per existing logger, installed again
when a store module imports a driver module that creates new ones.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse

__all__ = ["RedactingFilter", "guard_loggers", "redacted", "remember"]

MASK = "***"

# Keys whose value is a secret: anything naming a password (password,
# sentinel_password, sslpassword, PGPASSWORD, passwd, pwd). Not "token" or
# "key": rampart's own messages speak of max_tokens and sslkey (a path).
_SECRET_KEY = r"[A-Za-z0-9_.-]*(?:password|passwd)[A-Za-z0-9_.-]*|pwd"
_SECRET_KEY_RE = re.compile(rf"(?:{_SECRET_KEY})", re.IGNORECASE)

# scheme://user:SECRET@ — the secret runs to the last '@' before whitespace or a
# quote (a password may hold an unencoded '@' or '/').
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:'\"]*):[^\s'\"]*@")

# key=value (or key: value) pairs, in the shapes a secret is quoted in: libpq
# quoting or a Python repr ('p w\\'d'), double quotes (a repr, JSON), or bare
# (a URL query, a libpq string). A bare value runs to whitespace or a quote; in
# a URL query the next parameter, after '&', is given back (_mask_pair).
_PAIRS = re.compile(
    rf"""(?P<key>(?<![A-Za-z0-9_.-])(?:{_SECRET_KEY})['"]?\s*[=:]\s*)"""
    r"""(?:'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s'"]*)""",
    re.IGNORECASE,
)
_QUERY_TAIL = re.compile(r"&(?=[A-Za-z0-9_.%-]+=)")

_LITERAL_MIN = 4

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()


def _mask_pair(m: re.Match[str]) -> str:
    key = m.group("key")
    rest = m.group(0)[len(key) :]
    if rest[:1] in ("'", '"'):
        return key + rest[0] + MASK + rest[0]
    # Unquoted: in a URL query the next parameter after '&' is not the secret.
    tail = _QUERY_TAIL.search(rest)
    return key + MASK + (rest[tail.start() :] if tail else "")


def _structural(text: str) -> str:
    text = _USERINFO.sub(lambda m: m.group(1) + ":" + MASK + "@", text)
    return _PAIRS.sub(_mask_pair, text)


def _secrets_of(url: str) -> set[str]:
    """The secret values ``url`` carries, as written and percent-decoded."""
    found: set[str] = set()
    _, sep, rest = url.partition("://")
    if sep:
        authority = re.split(r"[?#]", rest, maxsplit=1)[0]
        if "@" in authority:
            userinfo = authority.rsplit("@", 1)[0]
            if ":" in userinfo:
                found.add(userinfo.split(":", 1)[1])
    query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
    for part in query.split("&"):
        key, eq, value = part.partition("=")
        if eq and _SECRET_KEY_RE.fullmatch(urllib.parse.unquote_plus(key)):
            found.add(value)
    # libpq key=value strings (a DSN given where a URL is expected).
    for m in re.finditer(rf"(?:{_SECRET_KEY})\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", url, re.I):
        v = m.group(1)
        found.add(v[1:-1].replace("\\'", "'").replace("\\\\", "\\") if v[:1] == "'" else v)
    out = set()
    for v in found:
        out.add(v)
        out.add(urllib.parse.unquote(v))
        out.add(urllib.parse.unquote_plus(v))
    return {v for v in out if v}


def remember(url: str) -> None:
    """Note the secrets ``url`` carries, so that :func:`redacted` masks them
    wherever they appear (every store calls this on its URL, first thing)."""
    global _secrets
    new = _secrets_of(url) - _secrets
    if new:
        with _lock:
            _secrets = _secrets | new


def redacted(text: str) -> str:
    """``text`` (a URL, a DSN, a message, a log line) with every secret masked:
    URL user parts, password query parameters and key=value pairs, and every
    secret a store URL of this process carried (:func:`remember`)."""
    if not isinstance(text, str):
        text = str(text)
    out = _structural(text)
    # Longest first: a secret that contains another is masked whole.
    for secret in sorted(_secrets, key=len, reverse=True):
        if len(secret) >= _LITERAL_MIN and secret in out:
            out = out.replace(secret, MASK)
    return out


class RedactingFilter(logging.Filter):
    """Redacts a record's message (its arguments merged in) and its exception
    text before any handler formats it; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit: left to logging
            return True
        clean = redacted(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info:
            # A traceback quotes the exception's message (and the frames' lines):
            # handed to handlers already formatted and redacted.
            text = _FORMATTER.formatException(record.exc_info)
            clean = redacted(text)
            if clean != text:
                record.exc_info, record.exc_text = None, clean
        return True


_FORMATTER = logging.Formatter()


_FILTER = RedactingFilter()
_GUARDED = ("psycopg", "redis", "rampart")


def guard_loggers() -> None:
    """Put the redacting filter on every logger of psycopg, psycopg_pool,
    redis-py and rampart that exists now (idempotent; cheap)."""
    manager = logging.Logger.manager
    with _lock:
        names = [
            n
            for n in list(manager.loggerDict)
            if n.split(".", 1)[0] in _GUARDED or n.startswith("psycopg_pool")
        ]
        for name in [*names, *_GUARDED]:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
