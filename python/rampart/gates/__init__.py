"""The registry's relevance gate: which gate scores a task, and the steps of a
gated compile, ranking and score, written once for the sync and async drivers.

The choice, in order: a caller's ``gate=`` callable; the tool-example gate
(``rampart.toolgate.ExampleGate``) when the registry's tool blocks carry example
requests; the core's cosine gate, with the task vector cached per model and
mapped by the tool query adapter when the registry has one. Each step function
is a generator (``rampart._ops``) that yields what it needs from outside the core
(a task's vector, the pending blocks' vectors, a call that runs the model and
numpy together); ``BlockRegistry.compile`` and ``acompile`` drive the same steps.

The functions receive the registry as a :class:`~rampart._view.RegistryView`
and never import the class; the registry calls them from its methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rampart._args as _args
import rampart._core as _core
from rampart._ops import EMBED_PENDING, Encode, OffLoop, Steps
from rampart._view import DEFAULT_SEPARATOR, GateFn, RegistryView
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError, RampartError

__all__ = [
    "budget_and_separator",
    "gate_args",
    "may_gate_by_examples",
    "query_steps",
    "ranking_steps",
    "score_steps",
    "select_steps",
    "sep_tokens",
]

#: Task texts whose vectors (plain and adapter-mapped) a registry keeps.
QUERY_CACHE = 64
_FLOAT_MAX = 1.7976931348623157e308  # the largest finite float: a threshold below every score
_int = _args.int_arg
_number = _args.number
_check_budget = _args.check_budget
_text = _args.text
_vector = _args.vector
_MAX_INT = _args.MAX_INT


def query_steps(reg: RegistryView, task_text: str | None, task_embedding: Any) -> Steps[bytes]:
    """The task's vector (the model's, or ``task_embedding``), cached per model and task."""
    if task_embedding is not None:
        return _vector(task_embedding, "task_embedding")
    model = reg._model()
    text = _text(task_text, "task_text")
    # Agents compile for the same task before every model call: its vector is
    # kept (per model, a few dozen tasks) instead of running the model again.
    key = (id(model), text)
    q = reg._queries.get(key)
    if q is None:
        q = _vector((yield Encode(model, text)), "query embedding")
        if len(reg._queries) >= QUERY_CACHE:
            reg._queries.clear()
        reg._queries[key] = q
    return q


def gate_query_steps(reg: RegistryView, task_text: str | None, task_embedding: Any) -> Steps[bytes]:
    """The task vector the cosine gate scores with: the task's vector, mapped by
    the registry's tool query adapter when it has one (docs/tool-gate.md)."""
    q = yield from query_steps(reg, task_text, task_embedding)
    return reg._adapt(task_text, task_embedding, q)


def vector_steps(reg: RegistryView, run: Callable[[], Any]) -> Steps[Any]:
    """Run a cosine-gate call, embedding blocks written meanwhile until it
    finds every block with a vector (it returns None otherwise)."""
    for _ in range(100):
        if reg._core.unembedded():  # one comparison while nothing changed
            yield EMBED_PENDING
        out = run()
        if out is not None:
            return out
    raise RampartError(
        f"registry {reg.label!r}: blocks kept arriving faster than they could be embedded"
    )


def gate_scores(
    reg: RegistryView,
    view: _core.OrderView,
    task_text: str | None,
    gate: GateFn,
) -> list[float]:
    """A ``gate=`` callable's scores for the blocks of ``view``, one number each."""
    blocks = [InstructionBlock(b) for b in view.blocks()]
    scores = list(gate(task_text or "", blocks))
    if len(scores) != len(blocks):
        raise InvalidArgumentError(f"gate returned {len(scores)} scores for {len(blocks)} blocks")
    out = []
    for b, s in zip(blocks, scores):
        if type(s) is not float or s != s:  # numpy scalars go the long way
            try:
                s = _number(s, "score", finite=False)
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"gate returned {s!r} for block {b!r}; expected a number"
                ) from None
        out.append(float(s))
    return out


def gate_args(
    task_text: str | None,
    top_k: int | None,
    threshold: float | None,
    task_embedding: Any,
    what: str = "relevance_threshold",
) -> tuple[int | None, float | None]:
    """The checked ``top_k`` and threshold of a gated compile or a ranking
    (shared by the sync methods and their coroutine twins)."""
    if task_text is not None or task_embedding is None:
        _text(task_text, "task_text")
    if top_k is not None:
        top_k = _int(top_k, "top_k", minimum=0)
    if threshold is not None:
        threshold = _number(threshold, what)
    return top_k, threshold


def sep_tokens(reg: RegistryView, separator: str) -> int:
    """Tokens of the separator, counted once per registry and separator."""
    n: int | None = reg._sep_cache.get(separator)
    if n is None:
        # Checked before counting: the tokeniser would raise UnicodeEncodeError.
        sep = _text(separator, "separator")
        n = reg._sep_cache[sep] = reg._tok.count(sep)
    return n


def budget_and_separator(
    reg: RegistryView, max_tokens: int | None, separator: str | None
) -> tuple[int | None, str]:
    """The checked token budget (the registry's default when None) and the separator."""
    budget = reg.default_max_tokens if max_tokens is None else max_tokens
    if budget is not None and (type(budget) is not int or not 0 <= budget <= _MAX_INT):
        budget = _check_budget(budget)
    return budget, DEFAULT_SEPARATOR if separator is None else _text(separator, "separator")


def select_steps(
    reg: RegistryView,
    max_tokens: int | None,
    task_text: str | None,
    relevance_threshold: float | None,
    top_k: int | None,
    separator: str | None,
    task_embedding: Any,
    gate: GateFn | None,
    dry_run: bool,
    tools_in_prompt: bool,
) -> Steps[tuple[str | None, _core.Selection]]:
    """Gate, walk and cut (compile's stages 1-3), written once: ``compile``
    drives it in the calling thread, ``acompile`` on the event loop."""
    budget, sep = budget_and_separator(reg, max_tokens, separator)
    tools_in_prompt = bool(tools_in_prompt)
    if relevance_threshold is None and top_k is None:
        return reg._core.compile(
            budget,
            sep,
            sep_tokens(reg, sep),
            dry_run=dry_run,
            tools_in_prompt=tools_in_prompt,
        )
    if task_text is None and task_embedding is None:
        raise InvalidArgumentError(
            "relevance_threshold/top_k need a task: pass task_text or task_embedding"
        )
    top_k, relevance_threshold = gate_args(task_text, top_k, relevance_threshold, task_embedding)
    # Tool examples: one attribute read unless this registry has some.
    if (
        gate is None
        and task_text is not None
        and may_gate_by_examples(reg, task_text, task_embedding)
    ):
        # The tool-example gate runs the model and numpy together.
        text, k, threshold = task_text, top_k, relevance_threshold
        picked: tuple[str | None, _core.Selection] | None = yield OffLoop(
            lambda: select_by_examples(
                reg, text, threshold, k, budget, sep, dry_run, tools_in_prompt
            )
        )
        if picked is not None:
            return picked
    if gate is None:
        # The built-in cosine gate runs in the core: the matrix is scored
        # with the GIL released for large registries. _vector_steps embeds
        # any block still without a vector first.
        q = yield from gate_query_steps(reg, task_text, task_embedding)
        n = sep_tokens(reg, sep)
        out: tuple[str | None, _core.Selection] = yield from vector_steps(
            reg,
            lambda: reg._core.compile(
                budget,
                sep,
                n,
                q,
                threshold=relevance_threshold,
                top_k=top_k,
                dry_run=dry_run,
                tools_in_prompt=tools_in_prompt,
            ),
        )
        return out
    if not callable(gate):
        raise InvalidArgumentError(f"gate must be a callable(task_text, blocks), got {gate!r}")
    view = reg._core.view()
    scores = gate_scores(reg, view, task_text, gate)
    return reg._core.compile(
        budget,
        sep,
        sep_tokens(reg, sep),
        scores,
        view=view,
        threshold=relevance_threshold,
        top_k=top_k,
        dry_run=dry_run,
        tools_in_prompt=tools_in_prompt,
    )


def select_by_examples(
    reg: RegistryView,
    task_text: str,
    threshold: float | None,
    top_k: int | None,
    budget: int | None,
    sep: str,
    dry_run: bool,
    tools_in_prompt: bool,
) -> tuple[str | None, _core.Selection] | None:
    """The tool-example gate's selection (None: the registry has no example gate)."""
    import rampart.toolgate as toolgate

    examples = example_gate(reg, task_text, None)
    if examples is None:
        return None
    view, scores, why = examples.scores(task_text)
    # Learned-example blocks score -inf: a threshold keeps them out even when
    # top_k would admit every block.
    prompt, sel = reg._core.compile(
        budget,
        sep,
        sep_tokens(reg, sep),
        scores,
        view=view,
        threshold=-_FLOAT_MAX if threshold is None else threshold,
        top_k=top_k,
        dry_run=dry_run,
        tools_in_prompt=tools_in_prompt,
    )
    return prompt, toolgate.explained(sel, why)


def ranking_steps(
    reg: RegistryView,
    task_text: str | None,
    top_k: int | None,
    threshold: float | None,
    task_embedding: Any,
) -> Steps[list[tuple[InstructionBlock, float]]]:
    """The steps of ``find_relevant``: blocks by score against the task, best first."""
    top_k, threshold = gate_args(task_text, top_k, threshold, task_embedding, "threshold")
    if reg._tool_examples is not False:
        if may_gate_by_examples(reg, task_text, task_embedding):
            # The tool-example gate runs the model and numpy together.
            ranked: list[tuple[InstructionBlock, float]] | None = yield OffLoop(
                lambda: rank_by_examples(reg, task_text, top_k, threshold)
            )
            if ranked is not None:
                return ranked
    q = yield from gate_query_steps(reg, task_text, task_embedding)
    found = yield from vector_steps(reg, lambda: reg._core.rank(q, top_k, threshold))
    return [(InstructionBlock(b), s) for b, s in found]


def rank_by_examples(
    reg: RegistryView, task_text: str | None, top_k: int | None, threshold: float | None
) -> list[tuple[InstructionBlock, float]] | None:
    """The tool-example gate's ranking (None: the registry has no example gate)."""
    examples = example_gate(reg, task_text, None)
    if examples is None:
        return None
    ranked: list[tuple[InstructionBlock, float]] = examples.rank(task_text, top_k, threshold)
    return ranked


def score_steps(
    reg: RegistryView, runtime_id: str, task_text: str | None, task_embedding: Any
) -> Steps[float]:
    """The steps of ``score_block``: one block's cosine score against the task."""
    if task_text is None and task_embedding is None:
        raise InvalidArgumentError("score_block needs task_text or task_embedding")
    q = yield from gate_query_steps(reg, task_text, task_embedding)
    reg._core.get(runtime_id)  # unknown id: BlockNotFoundError before any embedding
    score = yield from vector_steps(reg, lambda: reg._core.score(runtime_id, q))
    return float(score)


def may_gate_by_examples(reg: RegistryView, task_text: str | None, task_embedding: Any) -> bool:
    """Whether a gated call may go to the tool-example gate (not known to be
    absent): it runs the model and numpy, so the a-methods run the sync call
    off the loop. One attribute read for registries without examples."""
    if task_text is None or task_embedding is not None:
        return False
    if reg._tool_examples is None:  # looked up once, as toolgate.default_gate does
        import rampart.toolgate as toolgate

        reg._tool_examples = toolgate.has_examples(reg)
    return bool(reg._tool_examples)


def example_gate(reg: RegistryView, task_text: str | None, task_embedding: Any) -> Any:
    """The registry's tool-example gate for a task (None: none, or a caller's vector)."""
    if reg._tool_examples is False or task_text is None or task_embedding is not None:
        return None
    import rampart.toolgate as toolgate

    return toolgate.default_gate(reg)
