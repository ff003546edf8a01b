"""rampart: RAMPART, a compile-time memory model for LLM agents (arXiv 2606.04628).

Instructions, tool schemas, skill files and learned heuristics live as named
instruction blocks in an ordered registry; before each model call the context is
compiled from it under explicit policy (order, relevance gate, token budget).
"""

from typing import TYPE_CHECKING, Any

from rampart import _core
from rampart.block import BlockReport, CompileResult, DryRunResult, InstructionBlock, Snapshot
from rampart.conversation import ContextPolicy, Conversation, ConversationItem, MessageReport
from rampart.errors import (
    BlockNotFoundError,
    BlockPermissionError,
    ContextOverflowError,
    EvictionError,
    InvalidArgumentError,
    ModelError,
    ModelNotFoundError,
    OrchestratorMutationError,
    ParseError,
    RampartError,
    RegistryFileError,
    SeedMutationError,
    StoreUnavailableError,
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
    "ContextOverflowError",
    "ContextPolicy",
    "Conversation",
    "ConversationItem",
    "DryRunResult",
    "EvictionError",
    "InstructionBlock",
    "InvalidArgumentError",
    "MessageReport",
    "ModelError",
    "ModelNotFoundError",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "OrchestratorMutationError",
    "ParseError",
    "RampartError",
    "RegistryFileError",
    "SeedBlock",
    "SeedMutationError",
    "SeedRegistry",
    "Snapshot",
    "StoreUnavailableError",
    "ToolSchema",
    "UnsupportedFormatError",
    "__version__",
    "count_tokens",
    "default_embedder",
    "get_by_label",
    "parse_tools",
    "register_parser",
    "render_tool",
]


def _version() -> str:
    # One version, written once in Cargo.toml: maturin puts it in the wheel's
    # metadata and compiles it into the extension (CARGO_PKG_VERSION). The metadata
    # is what pip and users see; the extension's copy serves a bare source tree.
    from importlib import metadata

    try:
        return metadata.version("rampart-registry")
    except metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return _core.__version__


if TYPE_CHECKING:
    from rampart.embeddings import OnnxEmbedder, OpenAIEmbedder, default_embedder

    __version__: str
    """The installed version (PEP 440), from the package metadata; equals the crate's."""

# Import costs nothing (PEP 562): what needs numpy/onnxruntime/tokenizers (the
# "embed" extra), http.client and ssl (the OpenAI embedder) or importlib.metadata
# (the version, ~45 ms) is loaded when one of these names is first used.
_LAZY = {
    "OnnxEmbedder": "rampart.embeddings",
    "default_embedder": "rampart.embeddings",
    "OpenAIEmbedder": "rampart.embeddings.openai",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        value = getattr(importlib.import_module(module), name)
    elif name == "__version__":
        value = _version()
    else:
        raise AttributeError(f"module 'rampart' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value
