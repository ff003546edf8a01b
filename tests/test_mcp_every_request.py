"""`rampart mcp` answers every request (issue 36): a tool call whose arguments hold a
lone-surrogate escape, or a request the SDK's transport cannot read, got no reply
at all and the client waited for ever.

Driven by the SDK's own stdio client, as tests/test_mcp.py does. That client cannot
write a lone surrogate (pydantic refuses to serialise one), so it talks to the
server through a small relay that rewrites two markers on the wire, byte for byte:
``<<U+D800>>`` in a string becomes the escape ``\\ud800`` a model's JSON holds, and
a call of the tool ``__params_not_object__`` gets string params."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import rampart
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import import_or_skip
from tests.test_hardening import ROUND
from tests.test_hardening_entries import ODD, SURROGATES
from tests.test_mcp import _cleared_conversation, data, text

mcp = import_or_skip("mcp", "mcp")

# The relay: the client's lines to the server with the markers rewritten; the
# server's stdout is the relay's own (inherited), so replies pass untouched.
RELAY = r"""
import json, subprocess, sys
server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE)
for line in sys.stdin.buffer:
    if b"__params_not_object__" in line:
        msg = json.loads(line)
        msg["params"] = "not an object"
        line = json.dumps(msg).encode() + b"\n"
    line = line.replace(b"<<U+D800>>", b"\\ud800").replace(b"<<U+DFFF>>", b"\\udfff")
    server.stdin.write(line)
    server.stdin.flush()
server.stdin.close()
sys.exit(server.wait())
"""
LONE = "<<U+D800>>"


def run(args: list[str], script: Any, errlog: Any) -> Any:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", RELAY, sys.executable, "-m", "rampart", "mcp", *args],
        env=dict(os.environ),
    )

    async def session() -> Any:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            return await script(s)

    return anyio.run(session)


async def _answer(call: Any) -> Any:
    """The reply to one request, or the JSON-RPC error it got; a test failure
    (not a hang) when none comes."""
    import anyio

    with anyio.fail_after(60):
        try:
            return await call
        except mcp.shared.exceptions.MCPError as exc:
            return exc


def test_every_request_gets_a_reply(tmp_path: Path) -> None:
    seed = tmp_path / "rules.md"
    seed.write_text("# Rules\n\nAlways answer in English.\n", encoding="utf-8")
    saved = tmp_path / "conversations"
    saved.mkdir()
    _cleared_conversation(rampart.Conversation("s1")).save(saved / "s1.json")

    async def script(s: Any) -> dict[str, Any]:
        call = s.call_tool
        out = {
            "write": await _answer(
                call("write_block", {"content": f"Use UTC {LONE}", "name": "tz"})
            ),
            "find": await _answer(call("find_blocks", {"task": f"time zone {LONE}"})),
            "compile": await _answer(call("compile_context", {"task": f"x {LONE}"})),
            "evict": await _answer(call("evict_block", {"name_or_id": f"no {LONE}"})),
            "tools": await _answer(call("find_tools", {"query": f"<<U+DFFF>> {LONE}"})),
            "recall": await _answer(
                call("recall", {"conversation": "s1", "query": f"src/f2.py row40 {LONE}"})
            ),
            "recall_id": await _answer(call("recall", {"conversation": "s1", "call_id": LONE})),
            "conv": await _answer(call("recall", {"conversation": LONE, "call_id": "c0"})),
            "bad_params": await _answer(call("__params_not_object__", {})),
        }
        out["listed"] = data(await _answer(call("list_blocks", {})))  # the server lives on
        return out

    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as err:
        out = run([str(seed), "--no-gate", "--conversations", str(saved)], script, err)
    # a model's text is repaired as everywhere: the lone surrogate is U+FFFD
    assert not out["write"].is_error and data(out["write"])["name"] == "tz"
    assert [b["preview"] for b in out["listed"] if b["name"] == "tz"] == ["Use UTC \ufffd"]
    assert not out["compile"].is_error
    assert "src/f2.py row40 journal" in text(out["recall"])
    for key in ("find", "evict", "tools", "recall_id", "conv"):  # tool errors, in words
        assert out[key].is_error and text(out[key]), key
    # a request the SDK cannot read: a JSON-RPC error under its id, and why on stderr
    assert isinstance(out["bad_params"], mcp.shared.exceptions.MCPError)
    assert out["bad_params"].error.code == -32602
    assert "params must be an object" in errlog.read_text()


# ---- the mending itself ---------------------------------------------------------------------


@ROUND
@given(st.text(st.one_of(st.characters(), SURROGATES, ODD, st.sampled_from(list('\\"u')))))
def test_escapes_of_lone_surrogates_become_replacement_characters(s: str) -> None:
    from rampart._args import repaired
    from rampart.mcp_server import mend_surrogate_escapes

    for ascii_only in (True, False):
        try:
            line = json.dumps([s, {s: 1}], ensure_ascii=ascii_only).encode("utf-8")
        except UnicodeEncodeError:  # a raw surrogate is no UTF-8 (the SDK decodes with replace)
            continue
        mended = mend_surrogate_escapes(line)
        # what the JSON meant (an escaped pair is one character), lone surrogates as U+FFFD
        meant = json.loads(line)[0]
        assert json.loads(mended) == [repaired(meant), {repaired(meant): 1}]
        if meant == repaired(meant):
            assert mended == line  # nothing else touched


@pytest.mark.parametrize(
    ("line", "forwarded", "why"),
    [
        (b"", None, None),
        (b"garbage", None, "not JSON"),
        (
            b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
            None,
        ),
        (b'{"jsonrpc":"1.0","id":"a","method":"ping"}', b"ping", 'jsonrpc must be "2.0"'),
        (b'{"jsonrpc":"2.0","id":4,"method":5}', b"ping", "method must be a string"),
        (b'{"jsonrpc":"2.0","id":5,"method":"x","params":[1]}', b"ping", "params must be"),
        (b'{"jsonrpc":"2.0","method":"x","params":"p"}', None, "notification"),
        (b'{"jsonrpc":"2.0","id":[1],"method":"x","params":"p"}', None, "cannot be answered"),
        (b'{"jsonrpc":"2.0","id":6,"result":{}}', b'{"jsonrpc":"2.0","id":6,"result":{}}', None),
    ],
)
def test_lines_the_sdk_would_drop(line: bytes, forwarded: bytes | None, why: str | None) -> None:
    from rampart.mcp_server import mend_line

    out, reason = mend_line(line)
    if forwarded is None:
        assert out is None
    else:
        assert out is not None and forwarded in out
    if forwarded == b"ping":  # answered by the SDK with an error under the same id
        msg = json.loads(out or b"")
        assert msg["id"] == json.loads(line)["id"] and msg["params"] == {"_meta": 0}
    assert (reason is None) == (why is None) and (why is None or why in (reason or ""))
