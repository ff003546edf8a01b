"""Tool schemas as instruction blocks: parse, validate, render and convert them.

A tool definition arrives in one of four shapes, detected per entry:

* OpenAI Chat Completions: ``{"type": "function", "function": {"name", "description",
  "parameters", "strict"}}``
* OpenAI Responses (flat): ``{"type": "function", "name", "description", "parameters",
  "strict"}``
* Anthropic Messages: ``{"name", "description", "input_schema"}`` (``"type": "custom"``
  allowed)
* MCP ``tools/list``: ``{"name", "title", "description", "inputSchema", "outputSchema",
  "annotations"}``

Any of them may also carry example requests, rampart's extension for the relevance
gate (docs/tool-gate.md): ``"examples": ["stage src/parser.py", ...]`` (what a user
would ask for when this tool is the one to call) and Anthropic-style
``"input_examples": [{"path": "src/parser.py"}, ...]`` (example arguments). They are
kept with the schema (so in a tool block's metadata) and never sent to an API.

and a collection of them as a list, an MCP ``tools/list`` result ``{"tools": [...]}``,
a JSON-RPC response whose ``result`` is one, a single definition, or a path to a JSON
file holding any of these. Each becomes a :class:`ToolSchema`; :func:`render_tool`
turns it into the natural-language text that the prompt and the relevance gate see,
and ``to_openai`` / ``to_anthropic`` / ``to_mcp`` give it back in the shape an API's
``tools`` parameter wants.

Fields no other format has are dropped on conversion, because the APIs reject unknown
keys: OpenAI and Anthropic have no ``title``, ``annotations`` or ``outputSchema``;
MCP has no ``strict``. The Responses API requires ``strict`` on every function tool
(the SDK's ``FunctionToolParam``), so ``to_openai_responses`` sends ``false`` when the
source did not say. Keys outside the fields above (``cache_control``, vendor
extensions) are not kept.

The package, one module per concern: :mod:`~rampart.tools.schema` (the
:class:`ToolSchema` value, its checks and conversions), :mod:`~rampart.tools.parse`
(shapes in, schemas out), :mod:`~rampart.tools.render` (the prompt's and the
gate's text), :mod:`~rampart.tools.examples` (example requests),
:mod:`~rampart.tools.blocks` (a tool block's metadata),
:mod:`~rampart.tools.from_callable` (a Python function's schema) and
:mod:`~rampart.tools.limits` (the bounds on untrusted definitions).
"""

from __future__ import annotations

from rampart._limits import forward_limits
from rampart.tools import limits
from rampart.tools.blocks import (
    block_metadata_json,
    check_block_metadata,
    schema_from_metadata,
    tool_name_clash,
)
from rampart.tools.examples import example_texts, load_examples, with_examples
from rampart.tools.from_callable import tool_schema
from rampart.tools.limits import (
    MAX_EXAMPLE_CHARS,
    MAX_EXAMPLES,
    MAX_RENDER_STEPS,
    MAX_RENDERED_CHARS,
    MAX_SCHEMA_DEPTH,
    MAX_TOOLS_FILE_BYTES,
)
from rampart.tools.parse import ToolsInput, parse_tools
from rampart.tools.render import render_tool, tool_gate_text
from rampart.tools.schema import FORMATS, METADATA_KEY, ToolSchema, check_format

__all__ = [
    "FORMATS",
    "MAX_EXAMPLES",
    "MAX_EXAMPLE_CHARS",
    "MAX_RENDERED_CHARS",
    "MAX_RENDER_STEPS",
    "MAX_SCHEMA_DEPTH",
    "MAX_TOOLS_FILE_BYTES",
    "METADATA_KEY",
    "ToolSchema",
    "ToolsInput",
    "block_metadata_json",
    "check_block_metadata",
    "check_format",
    "example_texts",
    "load_examples",
    "parse_tools",
    "render_tool",
    "schema_from_metadata",
    "tool_gate_text",
    "tool_name_clash",
    "tool_schema",
    "with_examples",
]


# A limit set here (``rampart.tools.MAX_TOOLS_FILE_BYTES = ...``, as docs/limits.md
# says a program may) is set in rampart.tools.limits, where the parsers read it.
forward_limits(__name__, limits)
