"""An agent server: several uvicorn worker processes sharing one registry.

Each worker opens a replica of the shared registry when it starts (the first
one creates it from seeds/) and serves it with the asyncio twins, so a write
waits on the store without holding up the worker's other requests, and a
gated compile of a new task runs the model off the event loop. A block one
worker writes is in every worker's replica within milliseconds;
``?sync=true`` makes a read wait until it has everything written before it.

A session's messages live in the same store as a :class:`rampart.Conversation`
(``POST /conversations/{name}/messages`` appends, ``POST /conversations/{name}/compile``
compiles the registry and the messages into a context window), so a session
started on one worker continues on any other, and every worker builds the same
request body from the same state.

The store is chosen by URL alone: ``redis://host:6379/0`` (workers on many
hosts), ``postgresql://…``, or ``sqlite:///abs/path.db`` (workers on one host).

Run::

    pip install fastapi uvicorn "rampart-registry[redis]"
    RAMPART_STORE=redis://127.0.0.1:6379/0 python examples/fastapi_agents.py --workers 4
    curl -X POST localhost:8000/blocks -H 'content-type: application/json' \\
         -d '{"content": "Run the linter before committing.", "trajectory_id": "run-1"}'
    curl -X POST localhost:8000/compile -H 'content-type: application/json' \\
         -d '{"max_tokens": 400}'
    curl -X POST localhost:8000/conversations/s1/messages -H 'content-type: application/json' \\
         -d '{"messages": [{"role": "user", "content": "Why did the build fail?"}]}'
    curl -X POST localhost:8000/conversations/s1/compile -H 'content-type: application/json' \\
         -d '{"context_window": 128000, "reply_tokens": 4096, "model": "gpt-4o"}'

Environment: ``RAMPART_STORE`` (default: a SQLite file in the temporary folder),
``RAMPART_REGISTRY`` (the registry's name, default ``agents``),
``RAMPART_EMBEDDING_MODEL`` (``default`` for MiniLM and ``top_k`` gating, or
``none``, the default here: no gating, a faster start).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import rampart
from fastapi import FastAPI, Request
from fastapi import Path as FastAPIPath
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from rampart.adapters import openai_chat

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
STORE = os.environ.get("RAMPART_STORE") or f"sqlite:///{tempfile.gettempdir()}/rampart-agents.db"
NAME = os.environ.get("RAMPART_REGISTRY", "agents")
MODEL = os.environ.get("RAMPART_EMBEDDING_MODEL", "none")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One replica per worker process, opened off the event loop; its follower
    # thread applies the other workers' writes as they land in the store.
    app.state.registry = await rampart.BlockRegistry.aopen(
        STORE, NAME, None if MODEL == "none" else MODEL, seeds=[SEEDS], label=NAME
    )
    app.state.conversations = {}  # name -> this worker's replica of a conversation
    try:
        yield
    finally:
        await app.state.registry.aclose()  # publishes access counts, stops following
        for conv in app.state.conversations.values():
            conv.close()


app = FastAPI(title="rampart agents", lifespan=lifespan)


def registry(request: Request) -> rampart.BlockRegistry:
    reg: rampart.BlockRegistry = request.app.state.registry
    return reg


# rampart's typed errors, as HTTP statuses.
_STATUS: list[tuple[type[Exception], int]] = [
    (rampart.BlockNotFoundError, 404),
    (rampart.InvalidArgumentError, 422),
    (rampart.UnsupportedFormatError, 422),  # a malformed message
    (rampart.ContextOverflowError, 413),  # what must be sent does not fit the window
    (rampart.EvictionError, 409),
    (rampart.BlockPermissionError, 403),
    (rampart.StoreUnavailableError, 503),
    (rampart.RampartError, 400),
]


@app.exception_handler(rampart.RampartError)
async def rampart_error(request: Request, exc: Exception) -> JSONResponse:
    status = next(code for kind, code in _STATUS if isinstance(exc, kind))
    return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=status)


class NewBlock(BaseModel):
    content: str
    trajectory_id: str
    name: str | None = None
    priority: float = Field(0.5, ge=0.0, le=1.0)


class CompileRequest(BaseModel):
    task: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=0)


class NewMessages(BaseModel):
    # OpenAI Chat, OpenAI Responses, Anthropic or Gemini messages (checked on append).
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=1000)


class ConversationCompile(BaseModel):
    context_window: int | None = Field(None, ge=1)
    reply_tokens: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)
    model: str = "gpt-4o"


# A conversation's name in the store, beside the registry's (its journal is its own).
SESSION = "[A-Za-z0-9_-]{1,64}"
_MAX_OPEN = 1024  # conversations a worker keeps open


async def conversation(request: Request, name: str) -> rampart.Conversation:
    """This worker's replica of conversation ``name``, caught up with the store."""
    open_: dict[str, rampart.Conversation] = request.app.state.conversations
    conv = open_.get(name)
    if conv is None:
        conv = await asyncio.to_thread(rampart.Conversation.open, STORE, f"{NAME}-session-{name}")
        if len(open_) >= _MAX_OPEN:  # the oldest replica goes; the store keeps it
            open_.pop(next(iter(open_))).close()
        open_[name] = conv
    await asyncio.to_thread(conv.sync)  # what the other workers appended
    return conv


def _block(b: rampart.InstructionBlock) -> dict[str, Any]:
    return {
        "runtime_id": b.runtime_id,
        "name": b.semantic_name,
        "content": b.content,
        "source": b.source,
        "priority": b.priority,
        "trajectory_id": b.trajectory_id,
    }


@app.get("/health")
async def health(request: Request) -> dict[str, Any]:
    reg = registry(request)
    return {"worker": os.getpid(), "blocks": len(reg), "position": reg.position}


@app.post("/blocks", status_code=201)
async def write(block: NewBlock, request: Request) -> dict[str, Any]:
    reg = registry(request)
    rid = await reg.awrite_agent_block(
        block.content, block.trajectory_id, block.name, block.priority
    )
    return {"runtime_id": rid, "worker": os.getpid(), "position": reg.position}


@app.get("/blocks")
async def blocks(request: Request, sync: bool = False) -> dict[str, Any]:
    reg = registry(request)
    if sync:
        await reg.sync_async()
    return {"worker": os.getpid(), "blocks": [_block(b) for b in reg.list_blocks()]}


@app.get("/blocks/{runtime_id}")
async def block(runtime_id: str, request: Request, sync: bool = False) -> dict[str, Any]:
    reg = registry(request)
    if sync:
        await reg.sync_async()  # everything written before this request, by any worker
    return {"worker": os.getpid(), **_block(reg.get_by_id(runtime_id))}


@app.delete("/blocks/{runtime_id}")
async def evict(runtime_id: str, request: Request) -> dict[str, Any]:
    gone = await registry(request).aevict(runtime_id)
    return {"worker": os.getpid(), "evicted": gone.runtime_id}


@app.post("/compile")
async def compile_context(req: CompileRequest, request: Request) -> dict[str, Any]:
    result = await registry(request).acompile(
        max_tokens=req.max_tokens, task_text=req.task, top_k=req.top_k
    )
    return {
        "worker": os.getpid(),
        "prompt": result.prompt,
        "included": result.included,
        "total_tokens": result.total_tokens,
    }


@app.post("/conversations/{name}/messages", status_code=201)
async def append_messages(
    msgs: NewMessages, request: Request, name: str = FastAPIPath(pattern=SESSION)
) -> dict[str, Any]:
    conv = await conversation(request, name)
    ids = await asyncio.to_thread(conv.append, msgs.messages)
    return {"worker": os.getpid(), "ids": ids, "items": len(conv)}


@app.post("/conversations/{name}/compile")
async def compile_conversation(
    req: ConversationCompile, request: Request, name: str = FastAPIPath(pattern=SESSION)
) -> dict[str, Any]:
    conv = await conversation(request, name)
    result = await registry(request).acompile(
        max_tokens=req.max_tokens,
        conversation=conv,
        context_window=req.context_window,
        reply_tokens=req.reply_tokens,
    )
    return {
        "worker": os.getpid(),
        # The whole request body, built from the compile (instructions, tools, messages).
        "body": openai_chat(result, model=req.model),
        "report": [
            {"id": r.id, "action": r.action, "reason": r.reason, "tokens": r.tokens}
            for r in result.message_report
        ],
    }


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", help="store URL (default: $RAMPART_STORE)")
    args = ap.parse_args()
    if args.store:
        os.environ["RAMPART_STORE"] = args.store  # the workers read it when they import us
    uvicorn.run(
        "fastapi_agents:app",
        app_dir=str(Path(__file__).resolve().parent),
        host=args.host,
        port=args.port,
        workers=args.workers,
    )


if __name__ == "__main__":
    main()
