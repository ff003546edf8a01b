"""``import rampart`` costs nothing it does not use (PEP 562, STYLE.md "Import
costs nothing"): heavy or rarely used dependencies load on first use. Checked in
a fresh interpreter, by which modules are loaded, not by time."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "yaml",
    "http.client",
    "ssl",
    "importlib.metadata",
    "rampart.embeddings",
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
    assert rampart.OpenAIEmbedder.__module__ == "rampart.openai_embedder"
    assert set(rampart.__all__) <= set(dir(rampart)) | {
        "OnnxEmbedder",
        "default_embedder",
        "OpenAIEmbedder",
        "__version__",
    }
