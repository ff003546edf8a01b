"""Every public name documented: list the public modules, classes, functions,
methods and properties of ``rampart`` that have no docstring, and fail if any.

Run by `make docs` with the docs tools (griffe reads the sources statically, as
mkdocstrings does for the API site). Public: not starting with an underscore, in
a module whose path has no private part; names a module imports from elsewhere are
checked where they are defined. Exempt: dunder methods, overload stubs, an override
of a documented base-class method, and a method of a documented ``typing.Protocol``
of the package that the class implements in full.
"""

from __future__ import annotations

import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent


def public(name: str) -> bool:
    return not name.startswith("_")


def documented_in_base(cls: griffe.Object, name: str) -> bool:
    """An override of a documented base-class method shares its docstring."""
    try:
        bases = cls.mro()  # type: ignore[attr-defined]
    except (AttributeError, ValueError, griffe.AliasResolutionError):
        return False
    for base in bases:
        method = base.members.get(name)
        if method is not None and method.docstring and method.docstring.value.strip():
            return True
    return False


def protocols(obj: griffe.Object, found: list[griffe.Object]) -> list[griffe.Object]:
    """Every ``typing.Protocol`` class defined in the package."""
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.kind is griffe.Kind.CLASS and any(
            str(b).split(".")[-1] == "Protocol" for b in member.bases
        ):
            found.append(member)
        if member.kind in (griffe.Kind.MODULE, griffe.Kind.CLASS):
            protocols(member, found)
    return found


PROTOCOLS: list[griffe.Object] = []


def documented_in_protocol(cls: griffe.Object, name: str) -> bool:
    """A method of a class that structurally implements a package Protocol (has
    all its methods) shares the Protocol's docstring for that method."""
    for proto in PROTOCOLS:
        methods = {n for n, m in proto.members.items() if m.kind is griffe.Kind.FUNCTION}
        if name in methods and methods <= set(cls.members):
            doc = proto.members[name].docstring
            if doc and doc.value.strip():
                return True
    return False


def walk(obj: griffe.Object, missing: list[str]) -> None:
    for member in obj.members.values():
        if member.is_alias or not public(member.name):
            continue
        if member.kind is griffe.Kind.ATTRIBUTE:
            continue  # constants and fields: described in their class or module
        if member.kind is griffe.Kind.FUNCTION and "typing.overload" in {
            str(d.value) for d in getattr(member, "decorators", [])
        }:
            continue
        documented = bool(member.docstring and member.docstring.value.strip())
        if not documented and obj.kind is griffe.Kind.CLASS:
            documented = documented_in_base(obj, member.name) or documented_in_protocol(
                obj, member.name
            )
        if not documented:
            missing.append(f"{member.relative_filepath}:{member.lineno}: {member.path}")
        if member.kind in (griffe.Kind.MODULE, griffe.Kind.CLASS):
            walk(member, missing)


def main() -> int:
    pkg = griffe.load(
        "rampart", search_paths=[ROOT / "python"], resolve_aliases=True, resolve_external=False
    )
    PROTOCOLS.extend(protocols(pkg, []))
    missing: list[str] = []
    if not (pkg.docstring and pkg.docstring.value.strip()):
        missing.append("python/rampart/__init__.py: rampart")
    walk(pkg, missing)
    for line in missing:
        print(f"no docstring: {line}")
    print(f"check_docstrings: {len(missing)} public names without a docstring")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
