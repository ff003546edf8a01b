"""``import rampart`` costs nothing it does not use (PEP 562, docs/design.md, House rules, "Import
costs nothing"): heavy or rarely used dependencies load on first use. Checked in
a fresh interpreter, by which modules are loaded, not by time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "yaml",
    "http.client",
    "ssl",
    "importlib.metadata",
    "rampart.embeddings.embedder",
    "rampart.embeddings.prepare",
    "rampart.embeddings.cache",
    "rampart.embeddings.providers",
    "rampart.embeddings.bert_onnx",
    "rampart.embeddings.openai",
    "rampart.openai_embedder",
    "rampart.toolgate",
    "rampart.probe",
)


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_import_rampart_loads_no_heavy_dependency() -> None:
    loaded = set(_loaded_after("import rampart"))
    assert "rampart.registry" in loaded  # the probe really imported the package
    assert sorted(m for m in HEAVY if m in loaded) == []
    # The registry needs the embedding plumbing only; the package imports lazily.
    assert sorted(m for m in loaded if m.startswith("rampart.embeddings")) == [
        "rampart.embeddings",
        "rampart.embeddings.base",
    ]


def test_a_write_and_a_compile_load_nothing_heavy() -> None:
    loaded = set(
        _loaded_after(
            "import rampart\n"
            "reg = rampart.BlockRegistry(label=None)\n"
            "reg.write_block('text', 'n')\n"
            "reg.compile(max_tokens=100)\n"
        )
    )
    assert sorted(m for m in HEAVY if m in loaded) == []


def test_lazy_names_resolve() -> None:
    import rampart

    assert rampart.__version__ == rampart._core.__version__  # one version, from Cargo.toml
    assert rampart.OpenAIEmbedder.__module__ == "rampart.embeddings.openai"
    assert set(rampart.__all__) <= set(dir(rampart)) | {
        "OnnxEmbedder",
        "default_embedder",
        "OpenAIEmbedder",
        "__version__",
    }


def test_embeddings_names_resolve_lazily_and_old_paths_still_work() -> None:
    # Everything about embeddings lives in rampart.embeddings; the module that first
    # published OpenAIEmbedder stays importable and hands out the same class.
    code = (
        "import sys, rampart.embeddings as E\n"
        "assert 'rampart.embeddings.openai' not in sys.modules\n"
        "from rampart.openai_embedder import OpenAIEmbedder, MIN_MAX_BODY\n"
        "from rampart.embeddings.openai import OpenAIEmbedder as Moved\n"
        "assert OpenAIEmbedder is Moved is E.OpenAIEmbedder\n"
        "assert E._DEFAULT is None and 'rampart.embeddings.embedder' not in sys.modules\n"
        "assert E.cache.VectorCache is E.VectorCache\n"
        "assert set(E.__all__) <= set(dir(E))\n"
    )
    loaded = set(_loaded_after(code))
    assert "rampart.embeddings.embedder" not in loaded  # E.cache needs numpy, not ONNX
    import rampart.embeddings as E

    with pytest.raises(AttributeError, match="no_such_name"):
        E.no_such_name  # noqa: B018
