"""Learning: what a rule is similar to, where it goes (quarantined or compiled), how
it is written as a lesson block, and the operator's side (approve, reject, forget).

Each function takes the agent as a :class:`LessonHost`, the few attributes learning
reads (the registry, the quarantine, the rule bound, the thresholds), so this module
never imports :class:`~rampart.agent.Agent` back; the agent's methods call in here.
Attributes are read at each call, so changing them on the agent takes effect at once.
"""

from __future__ import annotations

import difflib
import math
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rampart.agent import limits
from rampart.agent.quarantine import Quarantine, QuarantinedLesson
from rampart.agent.records import Lesson, Run
from rampart.agent.text import clip, normalise, renderable_rule
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError, RampartError

if TYPE_CHECKING:
    from rampart.registry import BlockRegistry

__all__ = ["LESSON_TAG", "LessonHost"]

#: The tag of every rule the agent learned (diagnosis or the ``remember`` tool).
LESSON_TAG = "lesson"


class LessonHost(Protocol):
    """What learning reads of an agent."""

    registry: BlockRegistry
    quarantine: Quarantine | None
    max_rule_chars: int
    duplicate_threshold: float | None
    lesson_priority: float
    _vectors: dict[str, Any]  # quarantined rule text -> its embedding


def learned(registry: BlockRegistry) -> list[InstructionBlock]:
    """The rules learned so far (blocks tagged ``lesson``), registry order."""
    return registry.find_by_tag(LESSON_TAG)


# ---- similarity --------------------------------------------------------------------


def duplicate_limit(host: LessonHost) -> float:
    """The similarity at or above which two rules are one: the agent's
    ``duplicate_threshold``, else the measure's default (cosine or text)."""
    if host.duplicate_threshold:
        return host.duplicate_threshold
    if host.registry.embedding_model is not None:
        return limits.DUPLICATE_COSINE
    return limits.DUPLICATE_TEXT


def similar(host: LessonHost, rule: str) -> tuple[InstructionBlock, float] | None:
    """The learned rule most similar to ``rule`` when at or above the threshold:
    cosine of the registry's embeddings when it has a model, else difflib's ratio
    of the normalised texts."""
    registry = host.registry
    existing = learned(registry)
    if not existing:
        return None
    model = registry.embedding_model
    best: tuple[InstructionBlock, float] | None = None
    if model is not None:
        import numpy as np

        registry.embed_pending()
        q = np.asarray(model.encode(rule), dtype=np.float32)
        qn = float(np.linalg.norm(q)) or 1.0
        for b in existing:
            v = registry.embedding(b.runtime_id)
            if v is None:
                continue
            s = float(q @ v) / (qn * (float(np.linalg.norm(v)) or 1.0))
            if math.isfinite(s) and (best is None or s > best[1]):
                best = (b, s)
    else:
        norm = normalise(rule)
        for b in existing:
            s = difflib.SequenceMatcher(None, norm, normalise(b.content)).ratio()
            if best is None or s > best[1]:
                best = (b, s)
    return best if best is not None and best[1] >= duplicate_limit(host) else None


def similarities(host: LessonHost, rule: str, others: Sequence[str]) -> list[float]:
    """``rule`` against texts outside the registry (quarantined rules), by the
    same measure as :func:`similar`."""
    model = host.registry.embedding_model
    if model is None:
        norm = normalise(rule)
        return [difflib.SequenceMatcher(None, norm, normalise(o)).ratio() for o in others]
    import numpy as np

    vectors = host._vectors

    def vector(text: str) -> Any:
        v = vectors.get(text)
        if v is None:
            v = np.asarray(model.encode(text), dtype=np.float32)
            v = v / (float(np.linalg.norm(v)) or 1.0)
            if len(vectors) >= limits.MAX_CACHED_VECTORS:
                vectors.clear()
            vectors[text] = v
        return v

    q = vector(rule)
    scores = [float(q @ vector(o)) for o in others]
    return [s if math.isfinite(s) else 0.0 for s in scores]


# ---- writing lessons -----------------------------------------------------------------


def learn(
    host: LessonHost, rule: str, run: Run, origin: str, raw: str, tainted: bool
) -> Lesson | QuarantinedLesson:
    """Keep ``rule``: quarantined when the model had read untrusted output (a
    near-duplicate of a pending entry adds a sighting to it), else compiled, and
    then every pending entry it near-duplicates is confirmed."""
    tags = ("memory",) if origin == "remember" else ()
    quarantine = host.quarantine
    if tainted and quarantine is not None:
        pending = quarantine.entries("pending")
        scores = similarities(host, rule, [q.rule for q in pending]) if pending else []
        best = max(range(len(scores)), key=scores.__getitem__, default=None)
        if best is not None and scores[best] >= duplicate_limit(host):
            entry = pending[best]
            if run.trajectory_id not in entry.sightings and entry.run_id != run.trajectory_id:
                entry.sightings = [*entry.sightings, run.trajectory_id][-limits.MAX_SIGHTINGS :]
        else:
            entry = QuarantinedLesson(
                id=f"q-{uuid.uuid4().hex[:12]}",
                rule=rule,
                run_id=run.trajectory_id,
                task=clip(run.task, 500),
                origin=origin,
                untrusted_tools=list(run.untrusted_reads),
                diagnosis=raw,
                created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            quarantine.add(entry)
        run.quarantined.append(entry)
        return entry
    lesson = write_lesson(host, rule, run.trajectory_id, origin, tags=tags)
    if quarantine is not None:
        pending = quarantine.entries("pending")
        scores = similarities(host, rule, [q.rule for q in pending]) if pending else []
        for entry, score in zip(pending, scores):
            if score >= duplicate_limit(host):
                entry.status, entry.decided_by = "confirmed", run.trajectory_id
                entry.block_id = lesson.block_id
                run.confirmed.append(entry.id)
    return lesson


def provenance(origin: str, trajectory_id: str, note: str = "") -> tuple[str, str]:
    """The wrap that renders a rule as data: where it came from, then the rule in
    quotes (the rule cannot close them: :func:`rampart.agent.text.renderable_rule`)."""
    day = time.strftime("%Y-%m-%d", time.gmtime())
    what = "Noted by the agent in run" if origin == "remember" else "Lesson learned from run"
    return f'{what} {trajectory_id} on {day}{note}: "', '"'


def write_lesson(
    host: LessonHost,
    rule: str,
    trajectory_id: str,
    origin: str = "diagnosis",
    *,
    tags: Sequence[str] = (),
    note: str = "",
    merge: bool = True,
) -> Lesson:
    """Compile ``rule`` as a lesson of run ``trajectory_id``, wrapped in its
    provenance: a near-duplicate learned rule (with ``merge``) gets the new text,
    otherwise a new agent block is written."""
    registry = host.registry
    rule = renderable_rule(rule, host.max_rule_chars)
    if not rule:
        raise InvalidArgumentError("a lesson's rule is empty once rendered as one line")
    prefix, suffix = provenance(origin, trajectory_id, note)
    near = similar(host, rule) if merge else None
    if near is not None:
        block, score = near
        try:
            registry.update_block_content(block.runtime_id, rule)
            registry.set_wrap(block.runtime_id, prefix, suffix)
            old = (block.wrap_prefix, block.wrap_suffix)
            return Lesson(block.runtime_id, rule, True, block.content, score, old)
        except RampartError:
            pass  # not ours to change (a seed, another registry's): add a new one
    rid = registry.write_agent_block(
        rule,
        trajectory_id,
        semantic_name=f"lesson_{trajectory_id.removeprefix('run-')[:8]}",
        priority=host.lesson_priority,
        tags=[LESSON_TAG, *tags],
    )
    registry.set_wrap(rid, prefix, suffix)
    return Lesson(rid, rule, False)


# ---- the operator's side of the quarantine --------------------------------------------


def held(host: LessonHost) -> Quarantine:
    """The agent's quarantine; InvalidArgumentError when it has none."""
    if host.quarantine is None:
        raise InvalidArgumentError("this agent has no quarantine (quarantine=False)")
    return host.quarantine


def approve(host: LessonHost, entry_id: str) -> Lesson:
    """:meth:`rampart.agent.Agent.approve`."""
    entry = held(host).get(entry_id)
    if entry.status != "pending":
        raise InvalidArgumentError(
            f"quarantined lesson {entry_id} is already {entry.status}"
            + (f" (by {entry.decided_by})" if entry.decided_by else "")
        )
    if not renderable_rule(entry.rule, host.max_rule_chars):
        raise InvalidArgumentError(
            f"quarantined lesson {entry_id} has no rule text once rendered as one line"
        )
    tags = ("memory", "approved") if entry.origin == "remember" else ("approved",)
    lesson = write_lesson(
        host,
        entry.rule,
        entry.run_id,
        entry.origin,
        tags=tags,
        note=", approved by an operator",
        merge=False,
    )
    entry.status, entry.decided_by, entry.block_id = "approved", "operator", lesson.block_id
    return lesson


def reject(host: LessonHost, entry_id: str) -> QuarantinedLesson:
    """:meth:`rampart.agent.Agent.reject`."""
    entry = held(host).get(entry_id)
    if entry.status != "pending":
        raise InvalidArgumentError(f"quarantined lesson {entry_id} is already {entry.status}")
    entry.status, entry.decided_by = "rejected", "operator"
    return entry


def forget(host: LessonHost, run: Run) -> int:
    """:meth:`rampart.agent.Agent.forget`."""
    if not isinstance(run, Run):
        raise InvalidArgumentError(f"forget takes a Run, got {type(run).__name__}")
    registry = host.registry
    n = registry.rollback_trajectory(run.trajectory_id)
    lesson = run.lesson
    if lesson is not None and lesson.updated and lesson.previous is not None:
        if lesson.block_id in registry:
            block = registry.get_by_id(lesson.block_id)
            if block.content == lesson.content:  # not changed again since
                registry.update_block_content(lesson.block_id, lesson.previous)
                if lesson.previous_wrap is not None:
                    registry.set_wrap(lesson.block_id, *lesson.previous_wrap)
                n += 1
    if host.quarantine is not None:
        for entry in host.quarantine.entries():
            if entry.run_id == run.trajectory_id:
                host.quarantine.discard(entry.id)
            elif entry.status == "confirmed" and entry.decided_by == run.trajectory_id:
                entry.status, entry.decided_by, entry.block_id = "pending", None, None
    return n
