"""rampart: RAMPART, a compile-time memory model for LLM agents (arXiv 2606.04628).

Instructions, tool schemas, skill files and learned heuristics live as named
instruction blocks in an ordered registry; before each model call the context is
compiled from it under explicit policy (order, relevance gate, token budget).
"""

from rampart._core import __version__
from rampart.block import BlockReport, CompileResult, DryRunResult, InstructionBlock, Snapshot
from rampart.errors import (
    BlockNotFoundError,
    BlockPermissionError,
    EvictionError,
    InvalidArgumentError,
    OrchestratorMutationError,
    ParseError,
    RampartError,
    RegistryFileError,
    SeedMutationError,
    UnsupportedFormatError,
)
from rampart.registry import DEFAULT_SEPARATOR, BlockRegistry, get_by_label
from rampart.seeds import BlockSource, SeedBlock, SeedRegistry, register_parser
from rampart.tokens import count_tokens
from rampart.tools import ToolSchema, parse_tools, render_tool

__all__ = [
    "DEFAULT_SEPARATOR",
    "BlockNotFoundError",
    "BlockPermissionError",
    "BlockRegistry",
    "BlockReport",
    "BlockSource",
    "CompileResult",
    "DryRunResult",
    "EvictionError",
    "InstructionBlock",
    "InvalidArgumentError",
    "OrchestratorMutationError",
    "ParseError",
    "RampartError",
    "RegistryFileError",
    "SeedBlock",
    "SeedMutationError",
    "SeedRegistry",
    "Snapshot",
    "ToolSchema",
    "UnsupportedFormatError",
    "__version__",
    "count_tokens",
    "get_by_label",
    "parse_tools",
    "register_parser",
    "render_tool",
]
