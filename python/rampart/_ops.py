"""One declaration per write operation drives the sync and the async API.

A write operation is declared once, as its *body*: the argument checks and the
one core call. The core call returns the operation's outcome (a local registry:
applied at once) or, for a shared registry, the encoded journal entry as a value
(``_core.PendingEntry``): the binding does no I/O. :func:`operation` turns the
body into the sync method, whose driver hands a pending entry to the replica
(append to the store, apply the journal up to it); :func:`aio` turns the same
declaration into the coroutine method, whose driver awaits the replica's async
append instead. An ``after`` step (what the method makes of the core's outcome)
is declared with the body, so both drivers run it.

Both methods are generated with the body's exact signature (parameter names,
kinds, defaults, annotations), so IDEs and type checkers see the real
parameters, and a call costs one extra frame, not an ``*args/**kwargs`` repack
(``write_block`` is the coordination hot path). ``tests/test_async.py`` checks
that every ``aX`` of the registry has the signature of ``X``.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import rampart._core as _core

if TYPE_CHECKING:
    from rampart._core import PendingEntry

__all__ = [
    "EMBED_PENDING",
    "Encode",
    "OffLoop",
    "Steps",
    "adrive",
    "aio",
    "body_of",
    "drive",
    "offloaded",
    "operation",
]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")

_Pending = _core.PendingEntry

#: The attribute that keeps a generated method's declaration (body, after).
_DECL = "__rampart_operation__"


def _parameters(body: Callable[..., Any]) -> tuple[str, str, dict[str, Any]]:
    """The body's parameter list as source (defaults bound to names in the
    returned namespace) and the argument list that forwards each parameter the
    way it was declared."""
    sig = inspect.signature(body)
    params: list[str] = []
    args: list[str] = []
    ns: dict[str, Any] = {}
    star = False
    for p in sig.parameters.values():
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star = "*" + p.name, True
            args.append("*" + p.name)
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
            args.append("**" + p.name)
        elif p.kind is p.KEYWORD_ONLY:
            if not star:
                params.append("*")
                star = True
            args.append(f"{p.name}={p.name}")
        elif p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"{body.__qualname__}: positional-only parameters are not supported")
        else:
            args.append(p.name)
        if p.default is not p.empty:
            ns[f"_d_{p.name}"] = p.default
            text += f"=_d_{p.name}"
        params.append(text)
    return ", ".join(params), ", ".join(args), ns


def _positional(body: Callable[..., Any]) -> Callable[..., Any] | None:
    """A copy of ``body`` whose keyword-only parameters are positional ones (None
    when it has ``*args``/``**kwargs``): same code, same globals."""
    code = body.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    copy = types.FunctionType(
        code.replace(co_argcount=code.co_argcount + code.co_kwonlyargcount, co_kwonlyargcount=0),
        body.__globals__,
        body.__name__,
        None,
        body.__closure__,
    )
    copy.__qualname__ = body.__qualname__
    return copy


def _generate(
    body: Callable[..., Any],
    after: Callable[[Any, Any], Any] | None,
    name: str,
    is_async: bool,
) -> Callable[..., Any]:
    params, args, ns = _parameters(body)
    call = _positional(body)
    if call is not None:
        # Every argument passed by position to a copy of the body whose
        # keyword-only parameters are positional: keyword passing would cost the
        # hot path (write_block) ~40 ns a call.
        args = ", ".join(inspect.signature(body).parameters)
    ns.update(_body=call or body, _after=after, _Pending=_Pending)
    self_name = next(iter(inspect.signature(body).parameters))
    submit = (
        f"await {self_name}._replica.asubmit(out.data, out.writes_text)"
        if is_async
        else f"{self_name}._replica.submit(out.data, out.writes_text)"
    )
    result = "out" if after is None else f"_after({self_name}, out)"
    src = (
        f"{'async ' if is_async else ''}def {name}({params}):\n"
        f"    out = _body({args})\n"
        "    if out.__class__ is _Pending:\n"
        f"        out = {submit}\n"
        f"    return {result}\n"
    )
    exec(compile(src, f"<rampart operation {body.__qualname__}>", "exec"), ns)
    fn: Callable[..., Any] = ns[name]
    fn.__module__ = body.__module__
    owner, _, _ = body.__qualname__.rpartition(".")
    fn.__qualname__ = f"{owner}.{name}" if owner else name
    annotations = dict(getattr(body, "__annotations__", {}))
    ret = annotations.get("return")
    if isinstance(ret, str):
        # The body may return the core's pending entry; the method never does.
        kept = [t.strip() for t in ret.split("|") if not t.strip().endswith("PendingEntry")]
        annotations["return"] = " | ".join(kept)
    if after is not None:
        annotations["return"] = getattr(after, "__annotations__", {}).get(
            "return", annotations.get("return")
        )
    # (an ``async def``'s return annotation is the awaited value's type)
    fn.__annotations__ = annotations
    # No __wrapped__: the generated method has the real signature itself, and
    # inspect.signature would show the body's (which may return a PendingEntry).
    setattr(fn, _DECL, (body, after))
    return fn


@overload
def operation(
    after: None = None,
) -> Callable[[Callable[Concatenate[S, P], R | PendingEntry]], Callable[Concatenate[S, P], R]]: ...
@overload
def operation(
    after: Callable[[Any, Any], T],
) -> Callable[[Callable[Concatenate[S, P], Any]], Callable[Concatenate[S, P], T]]: ...
def operation(
    after: Callable[[Any, Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a write operation: the decorated function is its body (checks
    and the core call); ``after(self, outcome)`` makes the method's return
    value from the core's outcome. Returns the sync method."""

    def declare(body: Callable[..., Any]) -> Callable[..., Any]:
        fn = _generate(body, after, body.__name__, is_async=False)
        fn.__doc__ = body.__doc__
        return fn

    return declare


def aio(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The coroutine twin of a method made by :func:`operation`, from the same
    declaration: a shared registry's entry is appended with the store's async
    client, so the event loop never waits for a round trip."""
    decl = getattr(method, _DECL, None)
    if decl is None:
        raise TypeError(f"{method.__qualname__} is not a declared operation")
    body, after = decl
    fn = _generate(body, after, "a" + body.__name__, is_async=True)
    fn.__doc__ = f":meth:`{body.__name__}` for coroutines (a shared registry's append is awaited)."
    return fn


def body_of(method: Callable[..., Any]) -> Callable[..., Any]:
    """The body of a declared operation (one operation's body may end in another's:
    ``write_agent_block`` is ``write_block`` with checks of its own)."""
    decl = getattr(method, _DECL, None)
    if decl is None:
        raise TypeError(f"{method.__qualname__} is not a declared operation")
    body: Callable[..., Any] = decl[0]
    return body


def offloaded(
    fn: Callable[P, R], *, name: str, then: Callable[[R], object] | None = None
) -> Callable[P, Coroutine[Any, Any, R]]:
    """A coroutine with ``fn``'s exact signature that runs ``fn`` (then ``then``
    on its result) on the loop's default executor: for calls that read a store
    or run a model once (``aopen``), where an async twin of every step would buy
    nothing."""
    params, args, ns = _parameters(fn)
    ns.update(_fn=fn, _then=then, _off_loop=_off_loop)
    src = f"async def {name}({params}):\n    return await _off_loop(_fn, _then, {args})\n"
    exec(compile(src, f"<rampart offloaded {fn.__qualname__}>", "exec"), ns)
    out: Callable[P, Coroutine[Any, Any, R]] = ns[name]
    out.__module__ = fn.__module__
    owner, _, _ = fn.__qualname__.rpartition(".")
    out.__qualname__ = f"{owner}.{name}" if owner else name
    out.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    out.__doc__ = f":meth:`{fn.__name__}` for coroutines (on the loop's default executor)."
    return out


async def _off_loop(
    fn: Callable[..., Any], then: Callable[[Any], object] | None, *args: Any, **kwargs: Any
) -> Any:
    import rampart.shared.aio as _aio

    def call() -> Any:
        out = fn(*args, **kwargs)
        if then is not None:
            then(out)
        return out

    return await _aio.off_loop(call)


# ---- reads that may need the model: one generator, two drivers -----------------------
#
# A read (a gated compile, a ranking) is written once as a generator that yields
# what it needs from outside the core: a task's vector, the pending blocks'
# vectors, or a call that runs the model and numpy together (the tool-example
# gate). ``drive`` runs it in the calling thread; ``adrive`` awaits each need
# without blocking the event loop (the model's async path or the loop's default
# executor), the pattern of ``Agent._loop``.


class Encode:
    """Need: ``model``'s vector of ``text``."""

    __slots__ = ("model", "text")

    def __init__(self, model: Any, text: str) -> None:
        self.model, self.text = model, text


class EmbedPending:
    """Need: every block without a vector embedded (``embed_pending``)."""

    __slots__ = ()


class OffLoop:
    """Need: ``call()``'s result, where it may block (the model and numpy)."""

    __slots__ = ("call",)

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call


EMBED_PENDING = EmbedPending()

#: A read's generator: yields needs, receives what each gave, returns ``T``.
Steps = Generator[Any, Any, T]


def drive(reg: Any, steps: Any) -> Any:
    """Run a read's generator in this thread; returns its value."""
    try:
        need = next(steps)
        while True:
            if need.__class__ is Encode:
                got: Any = need.model.encode(need.text)
            elif need.__class__ is EmbedPending:
                got = reg.embed_pending()
            else:
                got = need.call()
            need = steps.send(got)
    except StopIteration as done:
        return done.value


async def adrive(reg: Any, steps: Any) -> Any:
    """Run a read's generator on the event loop, awaiting each need off it."""
    import rampart.shared.aio as _aio

    try:
        need = next(steps)
        while True:
            if need.__class__ is Encode:
                got: Any = await _aio.aencode_one(need.model, need.text)
            elif need.__class__ is EmbedPending:
                got = await _aio.aembed_pending(reg)
            else:
                got = await _aio.off_loop(need.call)
            need = steps.send(got)
    except StopIteration as done:
        return done.value
