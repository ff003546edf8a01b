"""Print the requirements of one pyproject extra, one per line, for `pip install`.

The Makefile installs tool sets (docs, release) from the extras of pyproject.toml
without building the project, so each pin is written once.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip vendors the same parser
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: extra_requirements.py EXTRA", file=sys.stderr)
        return 2
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    if argv[0] not in extras:
        print(f"no extra {argv[0]!r} in pyproject.toml: {sorted(extras)}", file=sys.stderr)
        return 2
    print("\n".join(extras[argv[0]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
