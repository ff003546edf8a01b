"""The in-venv half of the wheel smoke suite (scripts/wheel_smoke.py runs it with
each fresh venv's interpreter, from a scratch folder outside the checkout).

Checks that ``rampart`` is the installed wheel (not the source tree), that the
versions agree, and runs the README's Python examples exactly as written: every
```python block of README.md, in order, in one namespace (later blocks use names the
first one defines). A block right after ``<!-- wheel-smoke: skip REASON -->`` is
skipped, with the reason printed (for examples that need a server).

Usage: python smoke_inside.py README_PATH EXPECTED_VERSION CHECKOUT_ROOT
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
SKIP = re.compile(r"<!--\s*wheel-smoke:\s*skip\s*(.*?)\s*-->\s*\Z", re.S)


def readme_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) for each ```python block."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        skip = SKIP.search(text[: m.start()])
        out.append((line, m.group(1), skip.group(1) or "marked" if skip else None))
    return out


def main(argv: list[str]) -> int:
    readme, expected, checkout = Path(argv[0]), argv[1], Path(argv[2]).resolve()
    import rampart
    from rampart import _core

    where = Path(rampart.__file__).resolve()
    if checkout in where.parents:
        raise SystemExit(f"rampart imported from the checkout ({where}), not the wheel")
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        raise SystemExit(f"rampart imported from {where}, outside the venv {sys.prefix}")
    versions = {rampart.__version__, _core.__version__, expected}
    if len(versions) != 1:
        raise SystemExit(f"versions disagree: {versions}")
    print(f"  import rampart {rampart.__version__} from {where.parent}")

    blocks = readme_blocks(readme.read_text(encoding="utf-8"))
    if not blocks:
        raise SystemExit(f"no ```python blocks in {readme}")
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for line, code, skip in blocks:
        if skip is not None:
            print(f"  README.md:{line}: skipped ({skip})")
            continue
        t0 = time.perf_counter()
        try:
            exec(compile(code, f"README.md:{line}", "exec"), namespace)
        except Exception as exc:
            raise SystemExit(f"README.md:{line}: the example raised {exc!r}") from exc
        print(f"  README.md:{line}: ran ({time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
