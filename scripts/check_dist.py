"""Check what `make dist` built: one abi3 manylinux2014 wheel and one sdist, both
with the licence files, the version from Cargo.toml, a clean `twine check`, and the
platform tag confirmed by `auditwheel show`.

Usage: python scripts/check_dist.py DIST_DIR   (run with the venv holding the
release tools: twine and auditwheel are found beside the interpreter).
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def cargo_version() -> str:
    m = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    if m is None:
        raise SystemExit("Cargo.toml has no package version")
    return m.group(1)


def fail(message: str) -> None:
    raise SystemExit(f"check_dist: {message}")


def check_wheel(wheel: Path, version: str) -> None:
    name = wheel.name
    if f"-{version}-" not in name:
        fail(f"{name}: expected version {version} (Cargo.toml)")
    if "-cp310-abi3-" not in name:
        fail(f"{name}: expected an abi3 wheel for CPython >= 3.10")
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        if "manylinux2014_x86_64" not in name:
            fail(f"{name}: expected the manylinux2014_x86_64 tag")
        out = subprocess.run(
            [str(BIN / "auditwheel"), "show", str(wheel)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        flat = " ".join(out.split())
        if 'consistent with the following platform tag: "manylinux_2_17_x86_64"' not in flat:
            fail(f"auditwheel does not confirm manylinux_2_17_x86_64:\n{out}")
        print(f"auditwheel: {wheel.name} is consistent with manylinux_2_17_x86_64 (glibc 2.17)")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"rampart_registry-{version}.dist-info"
        for lic in ("LICENSE", "NOTICE"):
            if f"{info}/licenses/{lic}" not in names:
                fail(f"{name}: {info}/licenses/{lic} missing")
        meta = z.read(f"{info}/METADATA").decode()
        if "License-Expression: Apache-2.0" not in meta:
            fail(f"{name}: METADATA lacks License-Expression: Apache-2.0")
        if not any(n.startswith("rampart/_core") for n in names):
            fail(f"{name}: the compiled extension rampart/_core is missing")
        if "rampart_pytest/__init__.py" not in names:  # the pytest11 entry point's module
            fail(f"{name}: rampart_pytest/__init__.py (the pytest plugin's entry point) is missing")
        entry_points = z.read(f"{info}/entry_points.txt").decode().replace(" ", "")
        if "rampart.pytest_plugin=rampart_pytest" not in entry_points:
            fail(f"{name}: the pytest11 entry point does not name rampart_pytest")
    print(f"wheel: {name} ({wheel.stat().st_size / 1e6:.1f} MB), LICENSE and NOTICE inside")


def check_sdist(sdist: Path, version: str) -> None:
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for needed in ("LICENSE", "NOTICE", "PKG-INFO", "pyproject.toml", "Cargo.toml", "Cargo.lock"):
        if needed not in names:
            fail(f"{sdist.name}: {needed} missing")
    stray = sorted(n for n in names if n.startswith((".venv", "target/", "dist/", "site/")))
    if stray:
        fail(f"{sdist.name}: build leftovers inside: {stray[:5]}")
    if not sdist.name.startswith(f"rampart_registry-{version}."):
        fail(f"{sdist.name}: expected version {version}")
    print(f"sdist: {sdist.name} ({len(names)} files), LICENSE and NOTICE inside")


def main(argv: list[str]) -> int:
    dist = Path(argv[0] if argv else "dist")
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        fail(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
    version = cargo_version()
    check_wheel(wheels[0], version)
    check_sdist(sdists[0], version)
    out = subprocess.run(
        [str(BIN / "twine"), "check", "--strict", str(wheels[0]), str(sdists[0])],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        fail(f"twine check failed:\n{out.stdout}{out.stderr}")
    print("twine check --strict: PASSED (wheel and sdist)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
