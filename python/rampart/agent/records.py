"""What a run leaves behind: each tool call (:class:`ToolResult`), each model call
(:class:`Step`), the rule it wrote (:class:`Lesson`) and the run itself
(:class:`Run`); and the actions the loop asks its driver to perform."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rampart.agent.quarantine import QuarantinedLesson
from rampart.block import CompileResult
from rampart.conversation import Conversation
from rampart.llm import Reply, ToolCall

__all__ = ["CheckFn", "Lesson", "Run", "Step", "ToolResult"]

CheckFn = Callable[[str, "Run"], "bool | tuple[bool, str]"]

# What the loop asks its driver to do: call the model, run one tool call, compile
# the context for the task, or run a registry step (memory tools, learning) that
# may write to a shared registry or run the embedding model. ``run`` does each in
# place; ``arun`` awaits the registry's asyncio twin (compile) or runs the step
# on a worker thread, so the event loop never waits on the store or the model.
Chat = tuple[str, list[dict[str, Any]], list[dict[str, Any]], int]
RegistryStep = tuple[str, Callable[..., Any], tuple[Any, ...]]
Action = Chat | tuple[str, ToolCall] | tuple[str, str, Conversation] | RegistryStep


@dataclass(frozen=True)
class ToolResult:
    """One executed tool call: what the model asked and what it was told."""

    call: ToolCall
    output: str  # as fed back to the model (cut at max_tool_result_chars)
    is_error: bool
    latency_s: float


@dataclass
class Step:
    """One model call of a run and the tool calls it made."""

    index: int
    compile: CompileResult  # what the model saw: .prompt, .included, .report, .tools()
    reply: Reply
    tools_offered: list[str]
    results: list[ToolResult] = field(default_factory=list)
    model_s: float = 0.0  # the model call alone
    latency_s: float = 0.0  # the whole step: compile, model, tools

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.reply.calls


@dataclass(frozen=True)
class Lesson:
    """The rule a failed run wrote: a new block (``updated=False``) or the new content
    of a near-duplicate rule (``previous`` holds what it replaced)."""

    block_id: str
    content: str
    updated: bool
    previous: str | None = None
    similarity: float | None = None
    previous_wrap: tuple[str, str] | None = None  # the provenance line it replaced


@dataclass
class Run:
    """The outcome of :meth:`Agent.run`."""

    task: str
    trajectory_id: str
    answer: str = ""
    steps: list[Step] = field(default_factory=list)
    stop_reason: str = "answer"  # "answer" or "max_steps"
    success: bool | None = None  # None: nothing judged it
    feedback: str = ""  # the checker's or judge's reason
    lesson: Lesson | None = None
    memory_writes: list[str] = field(default_factory=list)  # ids written by `remember`
    # Tools not in trusted_tools whose output the model was given, in first-read order:
    # a rule this run writes is quarantined when this is not empty.
    untrusted_reads: list[str] = field(default_factory=list)
    quarantined: list[QuarantinedLesson] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)  # quarantine ids this run confirmed
    found_tools: list[str] = field(default_factory=list)  # offered after find_tools
    prompt_tokens: int = 0  # every call of the run, judge and diagnosis included
    completion_tokens: int = 0
    latency_s: float = 0.0
    # The session's messages, this run's appended (pass it to the next run to continue).
    conversation: Conversation | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def tool_results(self) -> list[ToolResult]:
        return [r for s in self.steps for r in s.results]

    @property
    def tainted(self) -> bool:
        """Whether the model read output of an untrusted tool during this run."""
        return bool(self.untrusted_reads)


def add_usage(run: Run, reply: Reply) -> None:
    """Count ``reply``'s tokens into ``run`` (every call: steps, judge, diagnosis)."""
    run.prompt_tokens += reply.prompt_tokens or 0
    run.completion_tokens += reply.completion_tokens or 0
