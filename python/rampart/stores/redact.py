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
redacts each record of theirs (and rampart's) where it is made — a log record
factory, chained to the one in place — and puts :class:`RedactingFilter` on each
of their loggers as a second line, so a record is redacted before any handler
sees it, whatever the application's logging configuration. (A filter alone is
not enough: it applies only to records logged on that very logger, and redis-py
creates some loggers inside functions, on first use.)
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import urllib.parse
from typing import Any

__all__ = ["RedactingFilter", "guard_loggers", "redacted", "remember"]

MASK = "***"

# Keys whose value is a secret: anything naming a password (password,
# sentinel_password, sslpassword, PGPASSWORD, passwd, pwd). Not "token" or
# "key": rampart's own messages speak of max_tokens and sslkey (a path). Every
# quantifier is bounded or cannot overlap the next match: the text may be a
# hostile driver message of megabytes, and an unbounded [..]*password[..]* backtracks
# quadratically over a long run of word characters.
_SECRET_KEY = r"[A-Za-z0-9_.-]{0,40}(?:password|passwd)[A-Za-z0-9_.-]{0,40}|pwd"
_SECRET_KEY_RE = re.compile(rf"(?:{_SECRET_KEY})", re.IGNORECASE)

# The user part of a URL, scheme://user:SECRET@host: found by hand (_mask_userinfo),
# one pass per token, where a regex would rescan the rest of the token from
# every "://" in it.
_TOKEN = re.compile(r"[^\s'\"]+")
_USER_END = re.compile(r"[/?#@:]")
# A scheme's last 32 characters at most (a longer one still counts: masking
# more than a URL's user part is the safe way to be wrong).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}\Z")

# key=value (or key: value) pairs, in the shapes a secret is quoted in: libpq
# quoting or a Python repr ('p w\\'d'), double quotes (a repr, JSON), or bare
# (a URL query, a libpq string). A bare value runs to whitespace or a quote; in
# a URL query the next parameter, after '&', is given back (_mask_pair).
_PAIRS = re.compile(
    rf"""(?P<key>(?<![A-Za-z0-9_.-])(?:{_SECRET_KEY})['"]?[ \t]{{0,8}}[=:][ \t]{{0,8}})"""
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


def _mask_userinfo(m: re.Match[str]) -> str:
    """One token (a run without whitespace or quotes) with the password of its
    first URL user part masked: from the ':' after the user name to the token's
    last '@' (a password may hold an unencoded '@' or '/')."""
    token = m.group(0)
    at = token.rfind("@")
    pos = 0
    while at > 0:
        i = token.find("://", pos, at)
        if i < 0:
            break
        pos = i + 3
        # The user name ends at the first / ? # @ or ':' — it cannot run past the
        # next "://", so no character is looked at twice.
        end = _USER_END.search(token, pos, at + 1)
        if (
            end is not None
            and end.group() == ":"
            and _SCHEME.search(token, max(0, i - 32), i) is not None
        ):
            return token[: end.start()] + ":" + MASK + token[at:]
    return token


def _structural(text: str) -> str:
    if "://" in text and "@" in text:
        text = _TOKEN.sub(_mask_userinfo, text)
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
    for m in re.finditer(rf"(?:{_SECRET_KEY})[ \t]*=[ \t]*('(?:[^'\\]|\\.)*'|\S+)", url, re.I):
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
    """Redacts a record's message (its arguments merged in) and its traceback
    before any handler formats it; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record's message and arguments; never drops a record."""
        _redact_record(record)
        return True


def _redact_record(record: logging.LogRecord) -> None:
    if getattr(record, "_rampart_redacted", False):
        return
    record.__dict__["_rampart_redacted"] = True  # by the factory: the filter passes
    try:
        message = record.getMessage()
    except Exception:  # arguments that do not fit the format: left to logging
        return
    clean = redacted(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info:
        # A traceback quotes the exception's message: handed to handlers
        # already formatted and redacted.
        text = _FORMATTER.formatException(record.exc_info)
        clean = redacted(text)
        if clean != text:
            record.exc_info, record.exc_text = None, clean


_FORMATTER = logging.Formatter()
_FILTER = RedactingFilter()
_GUARDED = ("psycopg", "psycopg_pool", "redis", "rampart")
_factory_installed = False


def _guarded(name: str) -> bool:
    return name.split(".", 1)[0] in _GUARDED


def _install_factory() -> None:
    """Redact guarded records where they are made: redis-py creates some of its
    loggers inside functions, on first use, so no filter put on the loggers that
    exist beforehand would see those records. The factory in place (the
    application's, if it set one) still makes every record."""
    global _factory_installed
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if _guarded(record.name):
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def guard_loggers() -> None:
    """Make every log record of psycopg, psycopg_pool, redis-py and rampart
    redacted before a handler sees it: a record factory for all of them, and a
    filter on each of their loggers, created for every module of theirs imported
    so far (in case another record factory replaces this one). Idempotent and
    cheap: stores call it after importing driver modules."""
    with _lock:
        if not _factory_installed:
            _install_factory()
        names = set(logging.Logger.manager.loggerDict) | set(sys.modules)
        for name in [n for n in names if _guarded(n)]:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
