"""The embedder: tokenise, micro-batch, run the ONNX session, and the shared default
instance."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rampart._files import cache_dir
from rampart.embeddings.cache import _VECTOR_FILE, VectorCache, _vector_cache_wanted, file_sha256
from rampart.embeddings.coalesce import Coalescer, free_cores, usable_cores
from rampart.embeddings.prepare import (
    DEFAULT_MODEL_NAME,
    INSTALL_HINT,
    MODEL_DISTRIBUTION,
    _build,
    _cache_paths,
    _cache_valid,
    _find_source,
    _json,
    _model_limits,
    _package_version,
    _prepare,
    _require,
    _weights_digest,
    parse_model_name,
)
from rampart.embeddings.providers import (
    _CONTRIB_PROVIDERS,
    CPU,
    CUDA,
    _make_session,
    _resolve_providers,
)
from rampart.errors import InvalidArgumentError, ModelError, ModelNotFoundError

__all__ = ["OnnxEmbedder", "default_embedder", "model_info", "named_embedder", "plan_batches"]

# Micro-batching: a new batch starts when padding would exceed _PAD_SLACK of the real
# tokens, or at the size/token caps (the caps bound the [batch, heads, seq, seq]
# attention buffers).
_PAD_SLACK = 1.15
_BATCH_CPU = (8, 4096)  # (texts, padded tokens) per run
_BATCH_GPU = (128, 32768)


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidArgumentError("texts must be a list of str; use encode() for one text")
    try:
        out = list(texts)
    except TypeError:
        raise InvalidArgumentError(
            f"texts must be a list of str, not {type(texts).__name__}"
        ) from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidArgumentError(f"texts[{i}] must be str, not {type(t).__name__}")
    return out


def plan_batches(
    lengths: Sequence[int], *, max_batch: int, max_tokens: int, slack: float = _PAD_SLACK
) -> list[list[int]]:
    """Indices grouped into micro-batches, shortest texts first. A batch closes before
    its padded size (``len × longest``) would exceed ``slack`` × its real tokens,
    ``max_tokens``, or ``max_batch`` texts."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in order:
        n = lengths[i]
        padded = n * (len(cur) + 1)
        if cur and (len(cur) >= max_batch or padded > max_tokens or padded > slack * (real + n)):
            batches.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += n
    if cur:
        batches.append(cur)
    return batches


def _abandon(session: Any) -> None:
    """Never free ``session``: in a forked child its thread pool's workers do not
    exist, and onnxruntime's destructor would wait for them forever (the hang
    tests/test_fork.py guards against). The extra reference keeps it alive even
    through interpreter shutdown; a child pays one session's memory for it."""
    if session is not None:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(session))


class OnnxEmbedder:
    """Sentence embeddings from an ONNX model on onnxruntime (CPU, or CUDA when usable).

    ``model_dir=None`` loads the packaged all-MiniLM-L6-v2 (384-d, 256 tokens),
    building and caching its graph on first use. Otherwise ``model_dir`` is a
    directory (or an ``.onnx`` file) with a ``tokenizer.json`` and either an ONNX
    export — token outputs ``[batch, seq, dim]`` are mean-pooled, sentence outputs
    ``[batch, dim]`` used as they are, both L2-normalised — or a BERT
    ``model.safetensors`` + ``config.json`` (built and cached like the default).

    ``providers``: list (or comma string) of onnxruntime providers; default
    ``$RAMPART_PROVIDERS``, else CUDA when onnxruntime-gpu sees a GPU, else CPU. If
    an *automatic* CUDA choice fails at session creation, the embedder falls back
    to CPU with a :class:`RuntimeWarning` (same vectors, slower); an explicit
    choice never falls back. ``max_length``: tokens per text including special
    tokens (default: the model's, 256 for MiniLM); longer texts are truncated and
    :meth:`encode_batch_report` says which. ``threads``: onnxruntime intra-op
    threads. The default (None) chooses per run on the CPU: all cores while two
    or more are idle, else a 1-thread session, which neither spins nor waits for
    a worker that another process holds back (docs/embeddings.md, "Threads").

    Attributes: ``dim``, ``max_length``, ``providers`` (those in use), ``model_id``
    (``name:hash12:d<dim>:L<max_length>``, stable across processes: a cache key for
    vectors), ``name``, ``model_dir``, ``onnx_path`` (None when built in memory) and
    ``session_seconds`` (onnxruntime session creation time).

    Safe to share between threads: concurrent :meth:`encode` calls are coalesced
    into batches (one model pass serves them all), and one onnxruntime run is in
    flight per embedder at a time. Safe across ``fork()``: a child rebuilds the
    multi-threaded session on first use (its worker threads stay in the parent).
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        providers: Sequence[str] | str | None = None,
        max_length: int | None = None,
        threads: int | None = None,
        max_batch: int | None = None,
        vector_cache: bool | None = None,
    ) -> None:
        for name, v in (("max_length", max_length), ("threads", threads), ("max_batch", max_batch)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InvalidArgumentError(f"{name} must be a positive int or None, not {v!r}")
        if max_length is not None and max_length < 2:
            raise InvalidArgumentError("max_length must leave room for the special tokens")
        src = _find_source(model_dir)
        chosen, explicit = _resolve_providers(providers)
        tokenizers = _require("tokenizers")

        configured, hard = _model_limits(src.model_dir, src.tokenizer)
        limit = max_length or configured or hard or 512
        if max_length is None and hard is not None:
            limit = min(limit, hard)  # e.g. a tokenizer.json longer than the model allows
        if hard is not None and limit > hard:
            raise InvalidArgumentError(
                f"max_length {limit} exceeds the model's {hard} position embeddings"
            )
        contrib = all(p in _CONTRIB_PROVIDERS for p in chosen)
        graph: Path | bytes
        if src.onnx_path is not None:
            graph, digest = src.onnx_path, file_sha256(src.onnx_path)
        else:
            try:
                prepared = _prepare(
                    src.model_dir,
                    default=src.default,
                    contrib_ops=contrib,
                    force=False,
                    variant=src.variant,
                    delta=src.delta,
                )
                graph, digest = prepared.onnx_path, prepared.weights_sha256
            except ModelNotFoundError:
                raise
            except OSError as exc:  # read-only cache: build in memory for this process
                warnings.warn(
                    f"rampart: cannot write the model cache ({exc}); building the graph in "
                    "memory (set RAMPART_CACHE_DIR to a writable directory)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                graph = _build(src.model_dir, contrib, src.variant, src.delta).SerializeToString()
                digest = _weights_digest(src.model_dir, src.delta)
        where = str(graph) if isinstance(graph, Path) else f"{src.model_dir} (in memory)"

        t0 = time.perf_counter()
        self._session, self.providers = _make_session(graph, where, chosen, explicit, threads)
        # Per run, the default threads=None chooses between this session (all cores)
        # and a 1-thread one (see _session_for), made the first time it is wanted:
        # it costs a second copy of onnxruntime's pre-packed weights (~45 MB for
        # MiniLM) and ~30 ms, which an embedder on an idle machine never pays.
        self._threads = threads
        self._graph = (graph, where)
        self._adaptive = threads is None and self.providers == [CPU] and usable_cores() > 1
        self._solo: Any = None
        self.session_seconds = time.perf_counter() - t0
        self._pid = os.getpid()
        self._pool_stale = False
        self._state_lock = threading.Lock()  # the rest comes once _max_batch is known
        self._pool_lock = threading.Lock()
        self._in_flight = 0
        try:
            tok = tokenizers.Tokenizer.from_file(str(src.tokenizer))
        except Exception as exc:  # tokenizers raises a bare Exception
            raise ModelError(f"{src.tokenizer}: cannot load the tokenizer: {exc}") from exc
        # Configured once here and never mutated afterwards: concurrent encode calls
        # only share-borrow the Rust tokenizer, so threads cannot hit "Already borrowed".
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        probe = tok.encode("a").special_tokens_mask
        lead = next((i for i, m in enumerate(probe) if not m), len(probe))
        self._trail = next((i for i, m in enumerate(reversed(probe)) if not m), 0)
        self._lead = lead
        if lead + self._trail >= limit:
            raise InvalidArgumentError(f"max_length {limit} leaves no room for text")

        self._inputs = _input_plan(self._session, where)
        out = self._session.get_outputs()
        names = [o.name for o in out]
        self._output = "sentence_embedding" if "sentence_embedding" in names else names[0]
        shape = next(o.shape for o in out if o.name == self._output)
        self._external = src.onnx_path is not None
        # rampart's own graphs also output the token vectors (late interaction)
        self._tokens_output = (
            "token_embeddings" if "token_embeddings" in names and not self._external else None
        )
        self._token_output = len(shape) == 3
        if len(shape) not in (2, 3):
            raise ModelError(f"{where}: output {self._output} has rank {len(shape)}")
        self.max_length: int = limit
        dim = shape[-1] if isinstance(shape[-1], int) else None
        if dim is None:  # symbolic output size: ask the graph once
            dim = int(self._run([[0] * (lead + self._trail + 1)]).shape[-1])
        self.dim: int = int(dim)
        self.name = src.name
        self.model_dir = src.model_dir
        self.onnx_path = graph if isinstance(graph, Path) else None
        self.model_id = f"{src.name}:{digest[:12]}:d{self.dim}:L{limit}"
        gpu = CUDA in self.providers
        mb, mt = _BATCH_GPU if gpu else _BATCH_CPU
        self._max_batch = max_batch or mb
        self._max_tokens = mt
        self._locks()
        self.vector_cache: VectorCache | None = (
            VectorCache(cache_dir() / _VECTOR_FILE, self.model_id, self.dim)
            if _vector_cache_wanted(vector_cache)
            else None
        )

    def _locks(self) -> None:
        self._state_lock = threading.Lock()  # guards _in_flight and the lazy sessions
        self._pool_lock = threading.Lock()  # one run at a time on a multi-thread session
        self._in_flight = 0
        # Concurrent encode() calls form rounds of up to four CPU batches (plan_batches
        # splits them by length). With a 1-thread session at hand, one round per core
        # runs side by side: independent runs never wait for each other's threads.
        single = self._adaptive or self._threads == 1
        self._coalescer: Coalescer[list[int], np.ndarray] = Coalescer(
            self._encode_ids,
            limit=4 * self._max_batch,
            leaders=usable_cores() if single else 1,
        )

    def _check_fork(self) -> None:
        """In a forked child: new locks (a parent thread may have held one at the
        fork) and a rebuilt multi-threaded session, whose workers did not survive.
        The 1-thread session has no workers and is used on as it is."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._locks()
        self._pool_stale = self._threads != 1

    def __repr__(self) -> str:
        return (
            f"OnnxEmbedder({self.name!r}, dim={self.dim}, max_length={self.max_length}, "
            f"providers={self.providers})"
        )

    # -- tokens ----------------------------------------------------------------------------

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts)]

    def _truncate(self, ids: list[int]) -> list[int]:
        # Same result as the tokenizer's own right-truncation of a single sequence:
        # keep the leading specials and text, cut, then put the trailing specials back.
        limit = self.max_length
        if len(ids) <= limit:
            return ids
        t = self._trail
        return ids[: limit - t] + ids[len(ids) - t :] if t else ids[:limit]

    def token_lengths(self, texts: Iterable[str]) -> list[int]:
        """Token count of each text *before* truncation, special tokens included."""
        return [len(x) for x in self._ids(_check_texts(texts))]

    # -- running ------------------------------------------------------------------------

    def _session_for(self, alone: bool) -> tuple[Any, threading.Lock | None]:
        """The session for the next run, and the lock to run it under (None: it may
        run beside others). ``alone``: no other run of this embedder is in flight.

        With the default threads=None on the CPU: all cores for a run that is alone
        while at least two cores are idle (this thread's and one more); otherwise the
        1-thread session. On two cores with one taken by another process,
        onnxruntime's two workers wait for each other at every op (6.4 ms a query
        against 4.0 ms on one thread: issue 11), and concurrent runs of one thread
        each never wait for anybody."""
        if self._adaptive:
            free = free_cores() if alone else 0
            if free is not None and free < 2:
                with self._state_lock:
                    if self._solo is None:
                        graph, where = self._graph
                        self._solo = _make_session(graph, where, self.providers, True, 1)[0]
                return self._solo, None
        with self._state_lock:
            if self._pool_stale:
                graph, where = self._graph
                _abandon(self._session)
                self._session = _make_session(graph, where, self.providers, True, self._threads)[0]
                self._pool_stale = False
        return self._session, None if self._threads == 1 else self._pool_lock

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        return self._run_outputs(batch, False)[0]

    def _run_outputs(self, batch: list[list[int]], tokens: bool) -> tuple[np.ndarray, Any]:
        """One model pass: the sentence vectors, and the token vectors
        ``[batch, seq, dim]`` when ``tokens`` (None otherwise)."""
        lens = np.fromiter((len(x) for x in batch), dtype=np.int64, count=len(batch))
        width = int(lens.max())
        ids = np.zeros((len(batch), width), dtype=np.int64)
        for row, x in enumerate(batch):
            ids[row, : len(x)] = x
        mask = (np.arange(width) < lens[:, None]).astype(np.int64)
        feed = {}
        for name, kind, dtype in self._inputs:
            arr = ids if kind == "ids" else mask if kind == "mask" else np.zeros_like(ids)
            feed[name] = arr if dtype == np.int64 else arr.astype(dtype)
        with self._state_lock:
            alone = self._in_flight == 0
            self._in_flight += 1
        names = [self._output]
        if tokens and self._tokens_output is not None:
            names.append(self._tokens_output)
        try:
            session, lock = self._session_for(alone)
            if lock is None:
                outs = session.run(names, feed)
            else:  # two runs on one pool would split the same cores between them
                with lock:
                    outs = session.run(names, feed)
        finally:
            with self._state_lock:
                self._in_flight -= 1
        raw = outs[0]
        tok = outs[1] if len(outs) > 1 else None
        out: np.ndarray = np.asarray(raw, np.float32)
        if not self._external:
            return out, tok  # rampart's graph pools and normalises itself
        if self._token_output:
            m = mask[:, :, None].astype(np.float32)
            out = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norm = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = (out / np.maximum(norm, 1e-12)).astype(np.float32, copy=False)
        return unit, None

    @property
    def token_vectors(self) -> bool:
        """Whether :meth:`encode_with_tokens` returns token vectors (rampart's own
        graphs; an external ONNX export gives sentence vectors only)."""
        return self._tokens_output is not None

    def _skip_ids(self, skip: frozenset[str]) -> frozenset[int]:
        """The ids of the vocabulary's word pieces in ``skip`` (lower-cased, a
        WordPiece continuation's ``##`` or a SentencePiece word start's ``▁``
        removed), worked out once per set."""
        memo = self.__dict__.setdefault("_skip_memo", {})
        ids = memo.get(skip)
        if ids is None:
            vocab = self._tok.get_vocab()
            ids = frozenset(
                i
                for piece, i in vocab.items()
                if piece.lower().removeprefix("##").removeprefix("\u2581") in skip
            )
            memo[skip] = ids
        out: frozenset[int] = ids
        return out

    def encode_with_tokens(
        self, texts: Iterable[str], skip: frozenset[str] = frozenset()
    ) -> tuple[np.ndarray, list[Any]]:
        """``(vectors (n, dim) float32, tokens)``: the sentence vectors of
        :meth:`encode_batch` (never cached: new tool output is never in the vector
        cache) and, per text, its distinct content tokens' unit vectors (float16
        ``(k, dim)``: one row per distinct token id, special tokens and the word
        pieces in ``skip`` left out), or None per text where the graph has no
        token output or no token is left. For late interaction
        (rampart.relevance): one pass computes both."""
        items = _check_texts(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        toks: list[Any] = [None] * len(items)
        if not items:
            return out, toks
        self._check_fork()
        ids = [self._truncate(x) for x in self._ids(items)]
        lengths = [len(x) for x in ids]
        plan = plan_batches(lengths, max_batch=self._max_batch, max_tokens=self._max_tokens)
        dropped = self._skip_ids(skip) if skip else frozenset()
        for batch in plan:
            rows = [ids[j] for j in batch]
            vecs, tok = self._run_outputs(rows, True)
            out[batch] = vecs
            if tok is None:
                continue
            tok = np.asarray(tok, np.float32)
            for r, j in enumerate(batch):
                x = rows[r]
                # distinct token ids between the special tokens: a repeated token
                # adds nothing to a max over the passage's tokens but memory
                seen: dict[int, int] = {}
                for pos in range(self._lead, len(x) - self._trail):
                    if x[pos] not in dropped:
                        seen.setdefault(x[pos], pos)
                if not seen:
                    continue
                t = tok[r, list(seen.values())]
                t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
                toks[j] = t.astype(np.float16)
        return out, toks

    def encode(self, text: str) -> np.ndarray:
        """One text → float32 vector ``(dim,)``, unit length."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be str, not {type(text).__name__}")
        ids = self._truncate(self._tok.encode(text).ids)
        self._check_fork()
        return self._coalescer.submit(ids)

    async def aencode(self, text: str) -> np.ndarray:
        """:meth:`encode` for coroutines: the text joins the coalescer's next round,
        which runs on a thread (a caller's or the coalescer's own), never on the
        event loop; the loop only tokenises (microseconds)."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be str, not {type(text).__name__}")
        ids = self._truncate(self._tok.encode(text).ids)
        self._check_fork()
        return await self._coalescer.asubmit(ids)

    async def aencode_batch_report(self, texts: Iterable[str]) -> tuple[np.ndarray, list[bool]]:
        """:meth:`encode_batch_report` for coroutines: each text joins the
        coalescer's rounds (:meth:`aencode`), so a batch from one coroutine and
        the queries of others share model passes. The vector cache is not
        consulted (its reads and writes are disk I/O)."""
        import asyncio

        items = _check_texts(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        if not items:
            return out, []
        self._check_fork()
        full = self._ids(items)
        ids = [self._truncate(x) for x in full]
        rows = await asyncio.gather(*(self._coalescer.asubmit(x) for x in ids))
        for i, row in enumerate(rows):
            out[i] = row
        return out, [len(x) > self.max_length for x in full]

    def _encode_ids(self, items: list[list[int]]) -> list[np.ndarray]:
        """One coalesced round of :meth:`encode` calls: token ids → one vector each."""
        if len(items) == 1:
            return [self._run(items)[0].copy()]
        out = np.empty((len(items), self.dim), dtype=np.float32)
        lengths = [len(x) for x in items]
        for batch in plan_batches(lengths, max_batch=self._max_batch, max_tokens=self._max_tokens):
            out[batch] = self._run([items[j] for j in batch])
        return [row.copy() for row in out]

    def encode_batch_report(self, texts: Iterable[str]) -> tuple[np.ndarray, list[bool]]:
        """``(vectors (n, dim) float32, truncated)``: ``truncated[i]`` is True when text
        ``i`` had more than ``max_length`` tokens and only its start was embedded."""
        items = _check_texts(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        if not items:
            return out, []
        truncated = [False] * len(items)
        todo = list(range(len(items)))
        cache = self.vector_cache
        keys: list[bytes] = []
        if cache is not None:
            keys = [cache.key(t) for t in items]
            known = cache.get_many(keys)
            todo = []
            for i, k in enumerate(keys):
                hit = known.get(k)
                if hit is None:
                    todo.append(i)
                else:
                    out[i], truncated[i] = hit
        if todo:
            self._check_fork()
            full = self._ids([items[i] for i in todo])
            ids = [self._truncate(x) for x in full]
            for i, x in zip(todo, full):
                truncated[i] = len(x) > self.max_length
            lengths = [len(x) for x in ids]
            plan = plan_batches(lengths, max_batch=self._max_batch, max_tokens=self._max_tokens)
            rows = np.asarray(todo)
            for batch in plan:
                out[rows[batch]] = self._run([ids[j] for j in batch])
            if cache is not None:
                cache.put_many([(keys[i], out[i], truncated[i]) for i in todo])
        return out, truncated

    def encode_batch(self, texts: Iterable[str]) -> np.ndarray:
        """Texts → float32 matrix ``(n, dim)``, C-contiguous, rows in input order."""
        return self.encode_batch_report(texts)[0]


def _input_plan(session: Any, graph: str) -> list[tuple[str, str, Any]]:
    types = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
    plan = []
    for inp in session.get_inputs():
        kind = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "types"}.get(
            inp.name
        )
        if kind is None or inp.type not in types:
            raise ModelError(
                f"{graph}: unsupported model input {inp.name} ({inp.type}); expected int "
                "input_ids, attention_mask and optionally token_type_ids"
            )
        plan.append((inp.name, kind, types[inp.type]))
    if not any(k == "ids" for _, k, _ in plan):
        raise ModelError(f"{graph}: the model has no input_ids input")
    return plan


# ---- the shared default instance, and a report -------------------------------------------

_DEFAULT: OnnxEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def _new_locks() -> None:
    # A lock held by another thread at fork() stays held in the child forever.
    global _DEFAULT_LOCK
    _DEFAULT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks)


def default_embedder() -> OnnxEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder, created on first call (thread-safe)."""
    global _DEFAULT
    emb = _DEFAULT
    if emb is None:
        with _DEFAULT_LOCK:
            emb = _DEFAULT
            if emb is None:
                emb = _DEFAULT = OnnxEmbedder()
    return emb


_NAMED: dict[str, OnnxEmbedder] = {}


def named_embedder(name: str) -> OnnxEmbedder:
    """The process-wide embedder of a packaged model by name (``"all-mpnet-base-v2"``,
    ``"multilingual-e5-small"``, a variant such as ``"all-MiniLM-L6-v2:int8"``, or the tool encoder
    ``"all-MiniLM-L6-v2:tools"``; ``"all-MiniLM-L6-v2"`` is :func:`default_embedder`),
    created on first call."""
    if name == DEFAULT_MODEL_NAME:
        return default_embedder()
    parse_model_name(name)  # InvalidArgumentError for an unknown name or variant
    emb = _NAMED.get(name)
    if emb is None:
        with _DEFAULT_LOCK:
            emb = _NAMED.get(name)
            if emb is None:
                emb = _NAMED[name] = OnnxEmbedder(name)
    return emb


def model_info(
    model_dir: str | Path | None = None, *, providers: Sequence[str] | str | None = None
) -> dict[str, Any]:
    """What ``rampart model info`` prints: where the model and its cache are, whether the
    graph is prepared, its size limits and the providers. Builds nothing."""
    info: dict[str, Any] = {
        "model": DEFAULT_MODEL_NAME if model_dir is None else str(model_dir),
        "package": MODEL_DISTRIBUTION if model_dir is None else None,
        "package_version": _package_version() if model_dir is None else None,
        "cache_dir": str(cache_dir()),
    }
    try:
        src = _find_source(model_dir)
    except ModelNotFoundError as exc:
        info.update(installed=False, error=str(exc))
        if model_dir is None:
            info["install"] = INSTALL_HINT
        return info
    configured, _ = _model_limits(src.model_dir, src.tokenizer)
    cfg = _json(src.model_dir / "config.json")
    info.update(installed=True, model_dir=str(src.model_dir), max_length=configured or 512)
    info["dim"] = cfg.get("hidden_size")
    try:
        ort = _require("onnxruntime")  # telemetry off before the import
        available = list(ort.get_available_providers())
        info["onnxruntime"] = ort.__version__
    except ImportError:
        available = []
        info["onnxruntime"] = None
    info["providers_available"] = available
    try:
        chosen = _resolve_providers(providers)[0] if available else []
        info["providers_selected"] = chosen
    except InvalidArgumentError as exc:
        chosen = []
        info["providers_selected"] = None
        info["providers_error"] = str(exc)
    if src.onnx_path is not None:
        info.update(onnx_path=str(src.onnx_path), prepared=True)
        return info
    from rampart.embeddings.bert_onnx import BertConfig

    contrib = all(p in _CONTRIB_PROVIDERS for p in chosen) if chosen else True
    try:
        bert = BertConfig.from_dir(src.model_dir)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        info.update(prepared=False, error=str(exc))
        return info
    sha = _weights_digest(src.model_dir, src.delta)
    paths = _cache_paths(src.model_dir, sha, bert, contrib, src.default, src.variant, src.delta)
    info.update(
        weights_sha256=sha,
        onnx_path=str(paths[0]),
        prepared=_cache_valid(*paths),
    )
    return info
