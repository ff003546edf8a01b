"""rampart inside agent frameworks: each module imports its framework only when used.

* :mod:`rampart.integrations.openai_agents`: dynamic instructions and tool gating
  for the OpenAI Agents SDK (``pip install "rampart-registry[agents]"``).

LangGraph and PydanticAI need no adapter (a compile call in their system-prompt
hook is enough); docs/integrations.md shows both.
"""
