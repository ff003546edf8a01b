"""Chat backends for the probes: :mod:`rampart.llm`'s, with native tools off.

The probes measure what a model does with tool schemas rendered into the prompt, so
their backends send ``tools`` in the request only when asked (``native_tools=True``,
the CLI's ``--native-tools``); everything else is :mod:`rampart.llm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rampart.llm as llm
from rampart.llm import Backend, BackendError, Message, Reply, ToolCall, parse_completion

__all__ = [
    "Backend",
    "BackendError",
    "LlamaCppBackend",
    "Message",
    "OpenAIBackend",
    "Reply",
    "ToolCall",
    "parse_completion",
]


class OpenAIBackend(llm.OpenAIBackend):
    """:class:`rampart.llm.OpenAIBackend` with ``native_tools`` off by default."""

    def __init__(self, base_url: str, model: str, *, native_tools: bool = False, **kw: Any) -> None:
        super().__init__(base_url, model, native_tools=native_tools, **kw)


class LlamaCppBackend(llm.LlamaCppBackend):
    """:class:`rampart.llm.LlamaCppBackend` with ``native_tools`` off by default: the
    probes' small models have no tool syntax in their chat templates."""

    def __init__(
        self, model: str | Path = "smollm2", *, native_tools: bool = False, **kw: Any
    ) -> None:
        super().__init__(model, native_tools=native_tools, **kw)
