"""pytest-benchmark: the agent loop's own cost per step, model call excluded (target <= 1 ms).

    python -m pytest benches/test_bench_agent.py --benchmark-only -p no:cacheprovider -q

The model is an in-process object whose ``chat`` returns a ready reply at once (the
first step calls a tool, the second answers), so a run's time is the loop's own:
per step it compiles the registry (the example seeds, 31 blocks, plus the agent's
tool blocks; ungated, and gated to the 8 most relevant over cached vectors), builds
the messages, offers the tools as native ``tools``, parses the reply, runs the tool
(a trivial Python function) and feeds its result back; after the last step the
checker runs. A run is two steps, so the per-step overhead is half a run. Beside
them in the same group, the baseline a hand-rolled loop cannot avoid: the same
compile alone, twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import rampart
from rampart.agent import Agent
from rampart.llm import Reply, ToolCall

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
TASK = "Write release notes for the changes since the last tag, then commit them"


def git_log(repo_path: str, max_count: int = 10) -> str:
    """Show the commit log of a repository.

    Args:
        repo_path: Path of the repository.
        max_count: How many commits to show.
    """
    return json.dumps([{"sha": "abc123", "subject": "fix login timeout"}] * max_count)


def git_tag(repo_path: str) -> str:
    """List the tags of a repository."""
    return "v1.3.0\nv1.4.0"


class InstantModel:
    """A model that answers at once: a call of the first tool it is offered, then
    (given the result) an answer."""

    model = "instant"
    max_concurrency = 1

    def describe(self) -> dict[str, Any]:
        return {"backend": "in-process", "model": self.model}

    def close(self) -> None:
        pass

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        temperature: float,
        seed: int,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply:
        if messages[-1]["role"] == "tool":
            return Reply("Release notes: fixed the login timeout.", (), 900, 12)
        name = tools[0]["function"]["name"] if tools else "none"
        return Reply("", (name,), 850, 20, (ToolCall("call_0", name, '{"repo_path": "."}'),))


def _agent(gated: bool) -> Agent:
    reg = rampart.BlockRegistry.from_files(
        [SEEDS], embedding_model="default" if gated else None, default_max_tokens=None
    )
    return Agent(
        reg,
        InstantModel(),
        [git_log, git_tag],
        top_k=12 if gated else None,
        learn=False,
        check=lambda answer, run: "Release notes" in answer,
    )


@pytest.mark.benchmark(group="agent-run-2-steps")
def test_agent_run(benchmark: Any) -> None:
    agent = _agent(gated=False)
    run = benchmark(lambda: agent.run(TASK))
    assert run.success and len(run.steps) == 2 and not run.tool_results[0].is_error


@pytest.mark.benchmark(group="agent-run-2-steps")
def test_agent_run_gated(benchmark: Any) -> None:
    pytest.importorskip("onnxruntime")
    agent = _agent(gated=True)
    agent.run(TASK)  # embeds the task once; later compiles reuse its vector
    run = benchmark(lambda: agent.run(TASK))
    assert run.success and len(run.steps) == 2
    assert not run.tool_results[0].is_error
    gated_tools = [t for t in run.steps[0].tools_offered if t != "find_tools"]  # + the fallback
    assert len(run.steps[0].compile.included) + len(gated_tools) <= 12


@pytest.mark.benchmark(group="agent-run-2-steps")
def test_compile_twice_baseline(benchmark: Any) -> None:
    reg = _agent(gated=False).registry

    def two() -> Any:
        reg.compile(None, tools_in_prompt=False)
        return reg.compile(None, tools_in_prompt=False)

    assert benchmark(two).tools("openai")
