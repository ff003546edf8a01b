"""Which onnxruntime execution providers to use, and creating a session on them."""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rampart.embeddings.prepare import _require
from rampart.errors import InvalidArgumentError, ModelError

__all__ = ["CPU", "CUDA", "PROVIDERS_ENV", "select_providers"]

GPU_HINT = 'pip uninstall -y onnxruntime && pip install "rampart-registry[gpu]"'

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
PROVIDERS_ENV = "RAMPART_PROVIDERS"
_ALIASES = {"cpu": CPU, "cuda": CUDA, "gpu": CUDA, "tensorrt": "TensorrtExecutionProvider"}
# Graphs with onnxruntime's com.microsoft fused ops run on these; others get the
# standard-op graph.
_CONTRIB_PROVIDERS = frozenset({CPU, CUDA})


def _normalise_providers(names: Iterable[str], source: str, available: Sequence[str]) -> list[str]:
    out: list[str] = []
    for raw in names:
        if not isinstance(raw, str):
            raise InvalidArgumentError(f"{source}: provider names must be str, not {raw!r}")
        name = raw.strip()
        if not name:
            continue
        name = _ALIASES.get(name.lower(), name)
        if name not in available:
            raise InvalidArgumentError(
                f"{source}: {name} is not available in this onnxruntime build "
                f"(available: {', '.join(available)})"
                + (f"; CUDA needs onnxruntime-gpu: {GPU_HINT}" if name == CUDA else "")
            )
        if name not in out:
            out.append(name)
    if not out:
        raise InvalidArgumentError(f"{source}: no execution provider named")
    return out


def select_providers(
    available: Sequence[str],
    requested: Sequence[str] | str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    gpu_usable: bool = False,
) -> tuple[list[str], bool]:
    """Which onnxruntime execution providers to use, and whether the choice was explicit.

    Precedence: ``requested`` (the ``providers=`` argument; a list or a comma string),
    then ``env["RAMPART_PROVIDERS"]`` (comma list), then automatic: CUDA first when
    onnxruntime offers it *and* ``gpu_usable``, else CPU. Names may be short aliases
    (``cpu``, ``cuda``/``gpu``, ``tensorrt``). An explicit choice naming an
    unavailable provider raises :class:`InvalidArgumentError`: asking for the GPU
    and silently getting the CPU is worse than an error.

    Pure (no onnxruntime or GPU access), so every branch is testable anywhere.
    """
    if requested is not None:
        names = requested.split(",") if isinstance(requested, str) else requested
        return _normalise_providers(names, "providers", available), True
    text = (env or {}).get(PROVIDERS_ENV, "").strip()
    if text:
        return _normalise_providers(text.split(","), PROVIDERS_ENV, available), True
    if CUDA in available and gpu_usable:
        return [CUDA, CPU], False
    return [CPU], False


def _cuda_device_count() -> int:
    """Visible CUDA devices, asked of the driver library directly (onnxruntime-gpu
    lists the CUDA provider even on machines without a GPU or driver)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return 0
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return 0
        except AttributeError:
            return 0
        return int(count.value)
    return 0


def _resolve_providers(requested: Sequence[str] | str | None) -> tuple[list[str], bool]:
    ort = _require("onnxruntime")
    available = list(ort.get_available_providers())
    gpu = CUDA in available and requested is None and _cuda_device_count() > 0
    return select_providers(available, requested, os.environ, gpu_usable=gpu)


def _make_session(
    graph: Path | bytes, where: str, providers: list[str], explicit: bool, threads: int | None
) -> tuple[Any, list[str]]:
    ort = _require("onnxruntime")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only: no provider-assignment chatter on stderr
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        opts.intra_op_num_threads = threads
    # The intra-op workers spin while a run is going (waking a sleeping thread for
    # each of the graph's ~50 parallel ops would cost more than the spin) and stop
    # the moment it returns. By default they keep spinning after it, stealing the
    # cores that the gate scan, numpy and the rest of a server need next.
    opts.add_session_config_entry("session.force_spinning_stop", "1")

    def create(chosen: list[str]) -> Any:
        model = str(graph) if isinstance(graph, Path) else graph
        # TF32 matmuls (on by default in onnxruntime's CUDA provider) cost the vectors
        # their float32 precision; the contract is sentence-transformers' fp32 output.
        options = [{"use_tf32": "0"} if p == CUDA else {} for p in chosen]
        # enable_fallback=0: onnxruntime's own fallback prints to stdout; we decide.
        return ort.InferenceSession(
            model, opts, providers=chosen, provider_options=options, enable_fallback=0
        )

    try:
        session = create(providers)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        if explicit or providers == [CPU]:
            raise ModelError(
                f"{where}: onnxruntime cannot load it with {providers}: {exc}"
            ) from exc
        warnings.warn(
            f"rampart: {providers[0]} session failed ({exc}); using {CPU}",
            RuntimeWarning,
            stacklevel=3,
        )
        session = create([CPU])
        return session, list(session.get_providers())
    used = list(session.get_providers())
    if not explicit and providers[0] not in used:
        # onnxruntime-gpu without cuDNN/driver drops CUDA with only a log line
        warnings.warn(f"rampart: {providers[0]} unavailable; using {used}", RuntimeWarning, 3)
    return session, used
