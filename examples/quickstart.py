"""The README's first example, spelled out: an agent note written mid-session,
promoted to the front, survives the relevance gate and leads the prompt; the
report says why every other block is in or out.

    python examples/quickstart.py        (needs the embed extra and the model package)
"""

from __future__ import annotations

from pathlib import Path

import rampart

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
TASK = "write the release notes"


def main() -> None:
    reg = rampart.BlockRegistry.from_files([SEEDS], "default")  # 31 blocks, embedded by MiniLM
    note = reg.write_agent_block("In release notes, list breaking changes first.", "run-42")
    reg.promote(note, to_front=True)  # order decides the prompt
    result = reg.compile(task_text=TASK, top_k=8, max_tokens=1024)

    first = result.included_blocks[0]
    print(f"task: {TASK!r}; gate: top 8 of {len(reg)}; budget 1024 tokens")
    print(f"first block in the prompt: {first.semantic_name!r} (the promoted note)")
    print(f"prompt starts: {result.prompt.splitlines()[0]!r}")
    print(f"included {len(result)} blocks, {result.total_tokens} tokens:")
    for r in result.report:
        if r.included:
            print(f"  + {r.name:<24} score {r.score:.3f}")
    gated = [r for r in result.report if r.reason == "gate"]
    budget = [r for r in result.report if r.reason == "budget"]
    print(f"left out by the gate: {len(gated)}, by the budget: {len(budget)}")
    for r in budget:
        print(f"  - {r.name:<24} {r.detail}")


if __name__ == "__main__":
    main()
