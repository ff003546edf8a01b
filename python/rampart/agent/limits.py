"""The agent's bounds and thresholds, in one place (docs/limits.md, docs/agent.md).

Read at call time by the modules that apply them."""

#: Cosine similarity at or above which a new rule updates an existing one. From the
#: learning demo's 30 rules (docs/agent.md): with all-MiniLM-L6-v2, rules for the same
#: convention scored a median 0.70, rules for different ones at most 0.46; the first
#: choice, 0.85, merged none of the paraphrases.
DUPLICATE_COSINE = 0.7
#: The same for normalised-text similarity (difflib ratio), without an embedding model:
#: it only catches near-verbatim repeats (paraphrases of one rule scored a median 0.47,
#: rules for different conventions up to 0.53, so no threshold separates them).
DUPLICATE_TEXT = 0.75

#: Most later untrusted runs a quarantined rule records as sightings.
MAX_SIGHTINGS = 16
#: Largest quarantine file :meth:`Quarantine.load` reads, in bytes.
MAX_QUARANTINE_BYTES = 64 << 20
#: Embeddings of quarantined rule texts an agent keeps (cleared when full: the
#: quarantined texts come and go).
MAX_CACHED_VECTORS = 1024
