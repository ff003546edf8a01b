"""Resource limits on untrusted tool definitions (docs/limits.md).

Read at call time, so a program that really needs more can raise one, here or on
:mod:`rampart.tools` (which forwards the assignment here).
"""

MAX_TOOLS_FILE_BYTES = 16 << 20
"""Largest tools JSON file read, in bytes."""
MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of objects and arrays in a tool's schemas (real tools: under 20)."""
MAX_RENDERED_CHARS = 256 << 10
"""Longest text :func:`render_tool` produces for one tool."""
MAX_RENDER_STEPS = 100_000
"""Most schema nodes :func:`render_tool` visits for one tool (``$ref`` fan-out)."""
MAX_EXAMPLES = 64
"""Most example requests (and, separately, input examples) one tool keeps."""
MAX_EXAMPLE_CHARS = 1000
"""Longest example request kept, in characters (one request, not a document)."""
