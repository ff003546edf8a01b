"""The cold tool gate's query adapter: a learned linear map of the task's vector
(not a gate), scored ``normalize(q + A q)`` against the blocks' own vectors."""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any

from rampart._files import FileProblem, read_regular_file
from rampart._view import RegistryView
from rampart.block import InstructionBlock
from rampart.errors import InvalidArgumentError, ModelError, RampartError

__all__ = [
    "ADAPTER_FILE",
    "MAX_ADAPTER_BYTES",
    "QueryAdapter",
    "packaged_adapter",
    "query_adapter",
    "set_query_adapter",
]

ADAPTER_FILE = Path(__file__).resolve().parent.parent / "data" / "tool_adapter_minilm.npz"
#: The largest query adapter file read: a 1024 x 1024 float32 matrix is 4 MiB.
MAX_ADAPTER_BYTES = 64 << 20


class QueryAdapter:
    """A learned linear map of a task's vector for the cold tool gate: the gate
    scores ``normalize(q + A q)`` against the blocks' own vectors, so only the
    task is mapped (one d x d matrix-vector product per new task) and the core's
    scan and the stored vectors stay as they are. :class:`ExampleGate` scores the
    blocks' own texts with the mapped task and example requests with the plain one.

    ``A`` is trained (benches/tool_gate_adapter.py) so that requests land nearer
    the gate text (:func:`rampart.tools.tool_gate_text`) of the tool they want
    than that of other tools, on requests for tools other than those it is
    evaluated on (docs/tool-gate.md). It belongs to one embedding model: a
    registry uses it only when its model's ``model_id`` is the adapter's.

    A file is a NumPy ``.npz`` with ``a`` (d x d) and ``meta`` (a JSON string with
    ``model_id`` and the provenance); read without pickle.
    """

    __slots__ = ("a", "meta", "model_id", "path")

    def __init__(self, path: str | Path) -> None:
        import numpy as np

        self.path = Path(path)
        try:
            # Read as a regular file of bounded size first: np.load would wait on a
            # FIFO and read /dev/zero until memory ran out.
            raw = io.BytesIO(read_regular_file(self.path, MAX_ADAPTER_BYTES))
            with np.load(raw, allow_pickle=False) as z:
                a = np.asarray(z["a"], dtype=np.float32)
                meta = json.loads(str(z["meta"]))
        except (FileProblem, OSError, ValueError, KeyError) as exc:
            raise ModelError(f"{self.path}: not a query adapter file: {exc}") from None
        if a.ndim != 2 or a.shape[0] != a.shape[1] or not np.isfinite(a).all():
            raise ModelError(
                f"{self.path}: adapter matrix has shape {a.shape} or non-finite values"
            )
        if not isinstance(meta, dict) or not isinstance(meta.get("model_id"), str):
            raise ModelError(f"{self.path}: adapter metadata names no model_id")
        self.a = np.ascontiguousarray(a)
        self.meta: dict[str, Any] = meta
        self.model_id: str = meta["model_id"]

    @property
    def dim(self) -> int:
        return int(self.a.shape[0])

    def map(self, q: bytes) -> bytes:
        """The mapped task vector (float32 bytes, unit length) of a task vector."""
        import numpy as np

        v = np.frombuffer(q, dtype=np.float32)
        if v.shape[0] != self.dim:
            raise InvalidArgumentError(
                f"query adapter {self.path.name} maps {self.dim}-d vectors, got {v.shape[0]}-d"
            )
        z = v + self.a @ v
        n = float(np.linalg.norm(z))
        return (z / n if n > 0 else z).astype(np.float32).tobytes()

    def __repr__(self) -> str:
        return f"QueryAdapter({self.path.name!r}, model_id={self.model_id!r})"


@functools.lru_cache(maxsize=1)
def packaged_adapter() -> QueryAdapter | None:
    """The adapter shipped with rampart (for all-MiniLM-L6-v2), or None where the
    file or numpy is missing. Loaded once per process."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return None
    return QueryAdapter(ADAPTER_FILE) if ADAPTER_FILE.exists() else None


def _has_tools(registry: RegistryView) -> bool:
    from rampart.tools import METADATA_KEY

    for b in registry._core.blocks():
        raw = b.metadata_json
        if raw is not None and METADATA_KEY in raw:
            try:
                if InstructionBlock(b).tool_schema is not None:
                    return True
            except RampartError:
                continue  # a malformed schema raises where it is read, not in the gate
    return False


def query_adapter(registry: RegistryView) -> QueryAdapter | None:
    """The adapter the registry's cold gate maps a task's vector with, or None.

    By default: the packaged adapter, when the registry holds a tool block and its
    embedding model is the one the adapter was trained for (a registry of
    instruction blocks only, another model, or an explicit ``task_embedding`` is
    never mapped). Looked up once per registry object and again after its own
    ``load_tools``; :func:`set_query_adapter` overrides it."""
    policy = registry._gate
    state = policy.adapter
    if state is None:
        state = False  # looked up: none (load_tools looks again)
        model = registry._embedder
        adapter = packaged_adapter() if model is not None else None
        if (
            adapter is not None
            and getattr(model, "model_id", None) == adapter.model_id
            and _has_tools(registry)
        ):
            state = adapter
        policy.adapter = state
    return state if isinstance(state, QueryAdapter) else None


def set_query_adapter(registry: RegistryView, adapter: QueryAdapter | None) -> None:
    """Use ``adapter`` for this registry's cold gate whatever it holds (None: no
    adapter, the plain cosine gate). The model is not checked: an adapter trained
    for another model's vectors maps them meaninglessly (a dimension mismatch
    raises at the next gated call)."""
    if adapter is not None and not isinstance(adapter, QueryAdapter):
        raise InvalidArgumentError(
            f"set_query_adapter takes a QueryAdapter or None, got {adapter!r}"
        )
    # "off" (not False): load_tools looks for an adapter again only after False.
    registry._gate.adapter_changed(adapter if adapter is not None else "off")
