"""The whole request: a conversation compiled beside the instructions and tools
under one budget, cache-aware (docs/specification.md §9; docs/conversation.md).

- :class:`Conversation` (core.py): the items of a session, an append-only log;
  save/load, and shared through a store (shared.py).
- shapes.py: the four providers' message shapes, in and out.
- :class:`ContextPolicy` (policy.py): what a compile may do, and when it pays.
- plan.py: the compile step ``BlockRegistry.compile(conversation=...)`` runs.
- retention.py: which tool results the step needs (relevance, excerpts, recall
  at the tail), over :mod:`rampart.relevance`; recall.py: the ``recall`` tool
  every cleared stub names, answered from the log.
- codec.py: the log as bytes; counting.py: the one place tokens are counted.
"""

from rampart.conversation.core import Conversation, Transformation
from rampart.conversation.items import ConversationItem, MessageReport, RewriteNote
from rampart.conversation.policy import ContextPolicy
from rampart.conversation.recall import RECALL_TOOL, answer_recall, recall_tool
from rampart.conversation.result import ContextResult
from rampart.conversation.shapes import FORMATS

__all__ = [
    "FORMATS",
    "RECALL_TOOL",
    "ContextPolicy",
    "ContextResult",
    "Conversation",
    "ConversationItem",
    "MessageReport",
    "RewriteNote",
    "Transformation",
    "answer_recall",
    "recall_tool",
]
