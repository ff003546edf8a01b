"""``rampart model prepare`` and ``rampart model info``: the embedding model's ONNX
graph built into the cache, and what is installed (numpy and onnxruntime are
imported only when one of them runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rampart.cli.common import CliError, Parser, progress


def _cmd_model_prepare(args: argparse.Namespace) -> int:
    from rampart.embeddings import prepare_model  # numpy/onnx only for this command

    # Building the graph from the weights takes seconds (more for a 768-d model).
    with progress("preparing the embedding model's ONNX graph"):
        p = prepare_model(args.model_dir, force=args.force)
    if args.json:
        out = {
            "model_dir": str(p.model_dir),
            "onnx_path": str(p.onnx_path),
            "weights_sha256": p.weights_sha256,
            "built": p.built,
            "seconds": p.seconds,
        }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{'built' if p.built else 'cached'}: {p.onnx_path}")
    print(f"weights sha256: {p.weights_sha256}")
    print(f"{'built' if p.built else 'checked'} in {p.seconds:.2f} s")
    return 0


def _cmd_model_info(args: argparse.Namespace) -> int:
    from rampart.embeddings import model_info

    info = model_info(args.model_dir, providers=args.providers)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"{key:<{width}}  {shown}")
    if not info.get("installed"):
        raise CliError(f"the embedding model is not installed: {info.get('install', '')}".strip())
    return 0


def add_parsers(sub: Any) -> None:
    """Add ``model prepare`` and ``model info`` to the ``rampart`` subcommands ``sub``."""
    m = sub.add_parser("model", help="the embedding model: prepare its ONNX graph, show info")
    msub = m.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    model_common = Parser(add_help=False)
    model_common.add_argument(
        "--model-dir",
        default=None,
        help="model directory or packaged name, NAME:int8 for its int8 graph "
        "(default: packaged all-MiniLM-L6-v2)",
    )
    model_common.add_argument("--json", action="store_true", help="machine-readable output")
    mp = msub.add_parser(
        "prepare", parents=[model_common], help="build the ONNX graph into the cache (once)"
    )
    mp.add_argument("--force", action="store_true", help="rebuild even if cached")
    mp.set_defaults(func=_cmd_model_prepare)
    mi = msub.add_parser("info", parents=[model_common], help="model, cache and provider report")
    mi.add_argument("--providers", default=None, help="comma list to check, e.g. cuda,cpu")
    mi.set_defaults(func=_cmd_model_info)
