"""Build an ONNX sentence-encoder graph from a BERT or MPNet ``model.safetensors``.

The graph maps ``input_ids``/``attention_mask`` (int64 ``[batch, seq]``) to
``sentence_embedding`` (float32 ``[batch, hidden]``): BERT encoder, masked mean (or
CLS) pooling and L2 normalisation, the way sentence-transformers computes it. Pooling
and normalisation live inside the graph so one ``session.run`` returns final vectors.
A second output, ``token_embeddings`` (``[batch, seq, hidden]``), is the last
layer's token vectors, for late interaction.

Nothing here needs torch or the ``safetensors`` package: the safetensors layout is
an 8-byte little-endian header length, a JSON header (dtype, shape, byte offsets per
tensor) and the raw little-endian tensor data, read with numpy.

MPNet (``model_type: mpnet``, e.g. sentence-transformers/all-mpnet-base-v2) is the
same post-LayerNorm encoder with three differences, all handled here: its weights
are named ``attention.attn.{q,k,v,o}`` / ``attention.LayerNorm``; its absolute
positions start after the padding index (``padding_idx + 1`` = 2, as RoBERTa's do),
with no token-type table; and every layer adds one shared relative position bias to
its attention scores: the signed distance ``j - i`` between key and query is mapped
to one of 32 buckets (16 per direction: distances 0–7 exactly, then logarithmic up
to 128) and each bucket has one learned scalar per head
(``encoder.relative_attention_bias``). The bucket of every (query, key) pair up to
the position limit is computed once here with numpy and stored as a constant; the
graph slices it to the run's length and gathers the per-head scalars.

XLM-RoBERTa (``model_type: xlm-roberta``, e.g. intfloat/multilingual-e5-small, see
:mod:`rampart.embeddings.e5_q4`) is BERT with BERT's weight names (under an optional
``roberta.`` prefix) and RoBERTa's positions: they start after the padding index, as
MPNet's do.

Two layouts are built from the same weights:

* ``contrib_ops=True`` (default): ONNX Runtime's fused ``com.microsoft`` ops
  (``Attention``, ``SkipLayerNormalization``, ``BiasGelu``), which its CPU and CUDA
  providers implement: 7 nodes per layer instead of 27, 10–20 % faster single
  queries and faster session creation (docs/embeddings.md). ``BiasGelu`` is the exact
  erf GELU; the graph matches sentence-transformers at cosine 0.9999997.
* ``contrib_ops=False``: standard ONNX ops only (opset 20), for other providers.

Weight folding done once here instead of at every run: Q, K and V are packed into
one ``[hidden, 3·hidden]`` matrix (one MatMul instead of three), ``1/sqrt(head_dim)``
is folded into the Q weights in the standard layout (the contrib ``Attention`` op
scales internally), Linear weights are stored pre-transposed (``[in, out]``), and
the token-type-0 row is added to the position table (rampart feeds single
sentences, whose token types are all 0).

A **weight delta** (``read_delta``, ``build_graph(..., delta=)``) is added to the base
tensors before the graph is built: that is how the packaged tool encoder
(``embedding_model="all-MiniLM-L6-v2:tools"``, docs/tool-gate.md) ships as a few MB
of fine-tuned top layers over the installed MiniLM instead of a second model. Its
file is an ``.npz`` (read without pickle) of ``<tensor>:int8`` matrices with one
float32 ``<tensor>:scale`` per row, ``<tensor>:f16`` vectors, and ``__meta__``
(JSON bytes: what it was trained on and for which base weights).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rampart._files import SMALL_FILE_BYTES, FileProblem, read_regular_file

__all__ = [
    "BertConfig",
    "apply_delta",
    "build_graph",
    "read_delta",
    "read_safetensors",
    "relative_position_buckets",
]

# Bump whenever the produced graph changes: it is part of the cache key, so an
# upgraded rampart never runs a stale cached graph.
GRAPH_VERSION = 2  # 2: the token vectors are a second output (late interaction)
OPSET = 20  # opset 20 brings the native Gelu op (exact erf and tanh forms)

_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}

_ACTIVATIONS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "relu": "relu"}
_MODEL_TYPES = ("bert", "mpnet", "xlm-roberta")

# Per-layer weight names (after the prefix "encoder.layer.{i}.") by model type.
_BERT_LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "o": "attention.output.dense",
    "ln1": "attention.output.LayerNorm",
}
_LAYER_NAMES = {
    "bert": _BERT_LAYER_NAMES,
    "xlm-roberta": _BERT_LAYER_NAMES,
    "mpnet": {
        "q": "attention.attn.q",
        "k": "attention.attn.k",
        "v": "attention.attn.v",
        "o": "attention.attn.o",
        "ln1": "attention.LayerNorm",
    },
}


def _json_file(path: Path) -> Any:
    """A model folder's JSON file: a FIFO, device or oversize file is a ValueError
    naming it, as a malformed one is."""
    try:
        return json.loads(read_regular_file(path, SMALL_FILE_BYTES))
    except FileProblem as exc:
        if exc.missing:
            raise FileNotFoundError(f"{path}: {exc}") from None
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class BertConfig:
    """The few ``config.json`` fields the graph depends on."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pooling: str = "mean"  # "mean" or "cls", from 1_Pooling/config.json
    model_type: str = "bert"  # "bert", "mpnet" or "xlm-roberta"
    # MPNet only: relative attention buckets (0: none). MPNet and XLM-R: the first
    # position row (padding_idx + 1; BERT's positions start at row 0).
    relative_buckets: int = 0
    position_offset: int = 0

    @classmethod
    def from_dir(cls, model_dir: Path) -> BertConfig:
        """The architecture of a sentence-transformers folder: ``config.json``, and the
        pooling mode from ``1_Pooling/config.json`` when present (mean otherwise)."""
        cfg = _json_file(model_dir / "config.json")
        pooling = "mean"
        pool_file = model_dir / "1_Pooling" / "config.json"
        if pool_file.is_file():
            pool = _json_file(pool_file)
            modes = {k for k, v in pool.items() if k.startswith("pooling_mode_") and v is True}
            if modes == {"pooling_mode_cls_token"}:
                pooling = "cls"
            elif modes - {"pooling_mode_mean_tokens"}:
                raise ValueError(f"{pool_file}: only mean or CLS pooling is supported")
        act = str(cfg.get("hidden_act", "gelu"))
        if act not in _ACTIVATIONS:
            raise ValueError(f"{model_dir / 'config.json'}: unsupported hidden_act {act!r}")
        # A config without model_type is taken as BERT (older exports omit it).
        model_type = str(cfg.get("model_type", "bert"))
        if model_type not in _MODEL_TYPES:
            raise ValueError(
                f"{model_dir / 'config.json'}: unsupported model_type {model_type!r} "
                f"(supported: {', '.join(_MODEL_TYPES)})"
            )
        mpnet = model_type == "mpnet"
        # RoBERTa-style absolute positions (MPNet, XLM-R) start after padding_idx.
        offset = int(cfg.get("pad_token_id", 1)) + 1 if model_type != "bert" else 0
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            intermediate_size=int(cfg["intermediate_size"]),
            max_position=int(cfg.get("max_position_embeddings", 512)),
            layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
            hidden_act=act,
            pooling=pooling,
            model_type=model_type,
            relative_buckets=int(cfg.get("relative_attention_num_buckets", 32)) if mpnet else 0,
            position_offset=offset,
        )

    @property
    def max_tokens(self) -> int:
        """Longest input the position table allows (MPNet loses its offset rows)."""
        return self.max_position - self.position_offset


def relative_position_buckets(length: int, num_buckets: int = 32, max_distance: int = 128) -> Any:
    """MPNet's bucket of every (query i, key j) pair, an int64 ``[length, length]``.

    Half the buckets are for keys after the query and half for keys before it; in
    each half, distances below a quarter of the buckets keep a bucket of their own
    and longer ones share buckets whose width grows logarithmically up to
    ``max_distance`` (T5's scheme, which MPNet adopted)."""
    pos = np.arange(length, dtype=np.int64)
    n = pos[:, None] - pos[None, :]  # i - j: positive when the key comes before the query
    half = num_buckets // 2
    bucket = np.where(n < 0, half, 0).astype(np.int64)
    n = np.abs(n)
    exact = half // 2
    # n < exact takes the other branch below; max(n, 1) only keeps log() finite there.
    scaled = np.log(np.maximum(n, 1).astype(np.float32) / exact) / math.log(max_distance / exact)
    far = exact + (scaled * (half - exact)).astype(np.int64)
    far = np.minimum(far, half - 1)
    return bucket + np.where(n < exact, n, far)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a read-only numpy view (memory-mapped)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    n = int(raw[:8].view("<u8")[0])
    if n <= 0 or 8 + n > raw.size:
        raise ValueError(f"{path}: not a safetensors file (bad header length {n})")
    header = json.loads(bytes(raw[8 : 8 + n]).decode("utf-8"))
    base = 8 + n
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], tuple(info["shape"])
        start, end = (base + int(x) for x in info["data_offsets"])
        if end > raw.size:
            raise ValueError(f"{path}: tensor {name} runs past the end of the file")
        buf = raw[start:end]
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            arr = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _DTYPES:
            arr = buf.view(np.dtype(_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        out[name] = arr.reshape(shape)
    return out


# A delta touches at most every tensor of a BERT-base-sized model; anything larger is
# not a delta (bounds what a damaged or hostile file can make numpy allocate).
_MAX_DELTA_VALUES = 200_000_000


def read_delta(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A weight delta file as float32 tensors by name, and its ``__meta__`` record.

    ``ValueError`` (naming the file and the entry) for anything that is not such a
    file: a member of another kind, a scale that does not match its matrix, a
    non-finite value, no metadata."""
    import zipfile

    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a weight delta file: {exc}") from exc
    with archive:
        members = set(archive.files)
        if "__meta__" not in members:
            raise ValueError(f"{path}: weight delta has no __meta__ record")
        try:
            meta = json.loads(bytes(archive["__meta__"]).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: __meta__ is not JSON: {exc}") from exc
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: __meta__ is not a JSON object")
        out: dict[str, np.ndarray] = {}
        total = 0
        for member in sorted(members - {"__meta__"}):
            name, _, kind = member.rpartition(":")
            if kind == "scale" and name + ":int8" in members:
                continue
            arr = archive[member]
            total += arr.size
            if total > _MAX_DELTA_VALUES:
                raise ValueError(f"{path}: more than {_MAX_DELTA_VALUES} values")
            if kind == "int8" and arr.dtype == np.int8 and arr.ndim == 2:
                scale_key = name + ":scale"
                scale = archive[scale_key] if scale_key in members else None
                if scale is None or scale.dtype != np.float32 or scale.shape != arr.shape[:1]:
                    raise ValueError(f"{path}: {member} has no float32 per-row {scale_key}")
                value = arr.astype(np.float32) * scale[:, None]
            elif kind == "f16" and arr.dtype == np.float16:
                value = arr.astype(np.float32)
            else:
                raise ValueError(f"{path}: unexpected entry {member} ({arr.dtype}, {arr.shape})")
            if not np.isfinite(value).all():
                raise ValueError(f"{path}: {member} holds non-finite values")
            out[name] = value
    if not out:
        raise ValueError(f"{path}: weight delta changes no tensor")
    return out, meta


def apply_delta(
    tensors: dict[str, np.ndarray], delta: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``tensors`` with each tensor ``delta`` names replaced by base + delta (a new
    dict; the base arrays, often read-only memory maps, are not written)."""
    out = dict(tensors)
    for name, d in delta.items():
        if name not in tensors:
            raise ValueError(f"the weight delta names {name!r}, which the base weights lack")
        base = tensors[name]
        if base.shape != d.shape:
            raise ValueError(
                f"the weight delta's {name!r} has shape {d.shape}, the base's {base.shape}"
            )
        out[name] = np.asarray(base, dtype=np.float32) + d
    return out


class _Weights:
    """Name lookup tolerant of the common checkpoint spellings (``bert.`` prefix,
    ``LayerNorm.gamma``/``beta``)."""

    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self._t: dict[str, np.ndarray] = {}
        for name, arr in tensors.items():
            key = name.removeprefix("bert.").removeprefix("mpnet.").removeprefix("roberta.")
            key = key.replace("LayerNorm.gamma", "LayerNorm.weight")
            key = key.replace("LayerNorm.beta", "LayerNorm.bias")
            self._t[key] = arr

    def __call__(self, name: str) -> np.ndarray:
        try:
            return np.ascontiguousarray(self._t[name], dtype=np.float32)
        except KeyError:
            raise ValueError(f"weights have no tensor {name!r}") from None

    def has(self, name: str) -> bool:
        return name in self._t


class _Graph:
    """A tiny ``onnx.helper`` wrapper: unique node/value names, initialisers."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper = helper
        self.numpy_helper = numpy_helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(
        self, op_type: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs: Any
    ) -> list[str]:
        self._n += 1
        outs = [f"{op_type.lower()}_{self._n}_{i}" for i in range(n_out)]
        self.nodes.append(
            self.helper.make_node(
                op_type,
                inputs,
                outs,
                name=f"{op_type}_{self._n}",
                domain=domain or None,
                **attrs,
            )
        )
        return outs

    def op1(self, op_type: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        return self.op(op_type, inputs, 1, domain, **attrs)[0]


def build_graph(
    tensors: dict[str, np.ndarray],
    cfg: BertConfig,
    *,
    contrib_ops: bool = True,
    delta: dict[str, np.ndarray] | None = None,
) -> Any:
    """The ``onnx.ModelProto`` of the sentence encoder (see the module docstring);
    ``delta`` (:func:`read_delta`) is added to the weights first."""
    from onnx import TensorProto, helper

    w = _Weights(apply_delta(tensors, delta) if delta else tensors)
    g = _Graph()
    h, nh = cfg.hidden_size, cfg.num_heads
    if h % nh:
        raise ValueError(f"hidden_size {h} is not a multiple of num_attention_heads {nh}")
    hd = h // nh
    eps = cfg.layer_norm_eps
    ms = "com.microsoft"

    names = _LAYER_NAMES[cfg.model_type]

    # ---- embeddings: word + (position + token-type 0) then LayerNorm -------------------
    # MPNet's and XLM-R's rows start at padding_idx + 1: for the real tokens of a
    # right-padded input their position ids (HF: cumsum of the non-pad mask +
    # padding_idx) are exactly offset, offset + 1, ...; padding never reaches a token.
    pos = w("embeddings.position_embeddings.weight")[cfg.position_offset : cfg.max_position]
    if w.has("embeddings.token_type_embeddings.weight"):
        pos = pos + w("embeddings.token_type_embeddings.weight")[0]
    word = g.const("word_embeddings", w("embeddings.word_embeddings.weight"))
    pos_t = g.const("position_embeddings", pos.astype(np.float32))
    emb_g = g.const("emb_ln.weight", w("embeddings.LayerNorm.weight"))
    emb_b = g.const("emb_ln.bias", w("embeddings.LayerNorm.bias"))

    def i64(name: str, value: Any) -> str:
        return g.const(name, np.asarray(value, dtype=np.int64))

    x_word = g.op1("Gather", [word, "input_ids"], axis=0)
    # Position rows 0..S-1 by slicing the table with Shape(start=1, end=2) of the ids:
    # the Shape→Gather→Range form crashed ORT 1.32's optimiser.
    seq_len = g.op1("Shape", ["input_ids"], start=1, end=2)
    x_pos = g.op1("Slice", [pos_t, i64("zero_1d", [0]), seq_len, i64("zero_1d_axes", [0])])
    x = g.op1("Add", [x_word, x_pos])
    x = g.op1("LayerNormalization", [x, emb_g, emb_b], axis=-1, epsilon=eps)

    mask_f = g.op1("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    if contrib_ops:
        mask_i32 = g.op1("Cast", ["attention_mask"], to=TensorProto.INT32)
    else:
        # additive bias [B,1,1,S]: 0 for tokens, float32.min for padding (as transformers does)
        inv = g.op1("Sub", [g.const("one", np.array(1.0, np.float32)), mask_f])
        neg = g.op1("Mul", [inv, g.const("neg_big", np.array(np.finfo(np.float32).min))])
        attn_bias = g.op1("Unsqueeze", [neg, i64("axes_1_2", [1, 2])])
        shape_bsnh = i64("shape_bsnh", [0, 0, nh, hd])
        shape_bsh = i64("shape_bsh", [0, 0, h])
    act_mode = _ACTIVATIONS[cfg.hidden_act]

    # MPNet's relative position bias [1, heads, S, S], shared by every layer: the
    # bucket table sliced to this run's length, then each bucket's per-head scalar.
    rel_bias = None
    if cfg.relative_buckets:
        buckets = relative_position_buckets(cfg.max_tokens, cfg.relative_buckets)
        table = g.const("rel_buckets", buckets)
        ends = g.op1("Concat", [seq_len, seq_len], axis=0)
        sliced = g.op1("Slice", [table, i64("zero_2d", [0, 0]), ends, i64("axes_0_1", [0, 1])])
        per_head = g.const("rel_bias.weight", w("encoder.relative_attention_bias.weight"))
        rel = g.op1("Gather", [per_head, sliced], axis=0)  # [S, S, heads]
        rel_bias = g.op1(
            "Unsqueeze", [g.op1("Transpose", [rel], perm=[2, 0, 1]), i64("axis_0", [0])]
        )
        if not contrib_ops:  # one bias for mask and positions: [B, heads, S, S]
            attn_bias = g.op1("Add", [attn_bias, rel_bias])

    for i in range(cfg.num_layers):
        p = f"encoder.layer.{i}."
        q_w, k_w, v_w = (w(p + names[n] + ".weight") for n in ("q", "k", "v"))
        q_b, k_b, v_b = (w(p + names[n] + ".bias") for n in ("q", "k", "v"))
        if not contrib_ops:  # fold the 1/sqrt(d) score scale into Q (exact up to rounding)
            scale = np.float32(1.0 / math.sqrt(hd))
            q_w, q_b = q_w * scale, q_b * scale
        qkv_w = g.const(f"l{i}.qkv.weight", np.concatenate([q_w, k_w, v_w], axis=0).T)
        qkv_b = g.const(f"l{i}.qkv.bias", np.concatenate([q_b, k_b, v_b]))
        o_w = g.const(f"l{i}.attn_out.weight", w(p + names["o"] + ".weight").T)
        o_b = g.const(f"l{i}.attn_out.bias", w(p + names["o"] + ".bias"))
        ln1_g = g.const(f"l{i}.ln1.weight", w(p + names["ln1"] + ".weight"))
        ln1_b = g.const(f"l{i}.ln1.bias", w(p + names["ln1"] + ".bias"))
        f1_w = g.const(f"l{i}.ffn1.weight", w(p + "intermediate.dense.weight").T)
        f1_b = g.const(f"l{i}.ffn1.bias", w(p + "intermediate.dense.bias"))
        f2_w = g.const(f"l{i}.ffn2.weight", w(p + "output.dense.weight").T)
        f2_b = g.const(f"l{i}.ffn2.bias", w(p + "output.dense.bias"))
        ln2_g = g.const(f"l{i}.ln2.weight", w(p + "output.LayerNorm.weight"))
        ln2_b = g.const(f"l{i}.ln2.bias", w(p + "output.LayerNorm.bias"))

        if contrib_ops:
            # inputs 4 (past state) and 5 (attention_bias, broadcast over the batch)
            extra = ["", rel_bias] if rel_bias is not None else []
            ctx = g.op1("Attention", [x, qkv_w, qkv_b, mask_i32, *extra], domain=ms, num_heads=nh)
            attn = g.op1("MatMul", [ctx, o_w])
            x = g.op("SkipLayerNormalization", [attn, x, ln1_g, ln1_b, o_b], 1, ms, epsilon=eps)[0]
            ff = g.op1("MatMul", [x, f1_w])
            if act_mode == "none":
                ff = g.op1("BiasGelu", [ff, f1_b], domain=ms)
            else:
                ff = _activation(g, g.op1("Add", [ff, f1_b]), act_mode)
            ff = g.op1("MatMul", [ff, f2_w])
            x = g.op("SkipLayerNormalization", [ff, x, ln2_g, ln2_b, f2_b], 1, ms, epsilon=eps)[0]
            continue

        qkv = g.op1("Add", [g.op1("MatMul", [x, qkv_w]), qkv_b])
        q, k, v = g.op("Split", [qkv], 3, axis=-1, num_outputs=3)
        q = g.op1("Transpose", [g.op1("Reshape", [q, shape_bsnh])], perm=[0, 2, 1, 3])
        k = g.op1("Transpose", [g.op1("Reshape", [k, shape_bsnh])], perm=[0, 2, 3, 1])
        v = g.op1("Transpose", [g.op1("Reshape", [v, shape_bsnh])], perm=[0, 2, 1, 3])
        scores = g.op1("Add", [g.op1("MatMul", [q, k]), attn_bias])
        probs = g.op1("Softmax", [scores], axis=-1)
        ctx = g.op1("Transpose", [g.op1("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op1("Reshape", [ctx, shape_bsh])
        attn = g.op1("Add", [g.op1("MatMul", [ctx, o_w]), o_b])
        x = g.op1("LayerNormalization", [g.op1("Add", [attn, x]), ln1_g, ln1_b], epsilon=eps)
        ff = g.op1("Add", [g.op1("MatMul", [x, f1_w]), f1_b])
        ff = _activation(g, ff, act_mode)
        ff = g.op1("Add", [g.op1("MatMul", [ff, f2_w]), f2_b])
        x = g.op1("LayerNormalization", [g.op1("Add", [ff, x]), ln2_g, ln2_b], epsilon=eps)

    # ---- pooling and L2 normalisation ---------------------------------------------------
    if cfg.pooling == "cls":
        pooled = g.op1("Gather", [x, g.const("zero_scalar", np.array(0, np.int64))], axis=1)
    else:
        m3 = g.op1("Unsqueeze", [mask_f, i64("axis_2", [2])])
        axis1 = i64("axis_1", [1])
        total = g.op1("ReduceSum", [g.op1("Mul", [x, m3]), axis1], keepdims=0)
        count = g.op1("ReduceSum", [m3, axis1], keepdims=0)
        count = g.op1("Max", [count, g.const("min_count", np.array(1e-9, np.float32))])
        pooled = g.op1("Div", [total, count])
    norm = g.op1("ReduceL2", [pooled, i64("axis_last", [-1])], keepdims=1)
    norm = g.op1("Max", [norm, g.const("min_norm", np.array(1e-12, np.float32))])
    g.nodes.append(helper.make_node("Div", [pooled, norm], ["sentence_embedding"], name="Div_out"))

    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        for n in ("input_ids", "attention_mask")
    ]
    output = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", h])
    # The last layer's token vectors as a second output: the relevance scorer's
    # late-interaction stage reads them (a run that does not ask for them pays
    # nothing: onnxruntime computes them anyway, for the pooling).
    g.nodes.append(helper.make_node("Identity", [x], ["token_embeddings"], name="Tokens_out"))
    tokens = helper.make_tensor_value_info(
        "token_embeddings", TensorProto.FLOAT, ["batch", "sequence", h]
    )
    graph = helper.make_graph(g.nodes, "sentence_encoder", inputs, [output, tokens], g.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if contrib_ops:
        opsets.append(helper.make_opsetid(ms, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="rampart")
    model.ir_version = 9  # readable by every onnxruntime >= 1.15
    return model


def _activation(g: _Graph, x: str, mode: str) -> str:
    if mode == "relu":
        return g.op1("Relu", [x])
    return g.op1("Gelu", [x], approximate=mode)
