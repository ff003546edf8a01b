"""Promote: directives, clamping, reorder and group promote."""

from __future__ import annotations

import pytest
import rampart

from tests.conftest import add


@pytest.fixture
def five(reg: rampart.BlockRegistry) -> list[str]:
    return [add(reg, n, 1) for n in "abcde"]


def names(r: rampart.BlockRegistry) -> str:
    return "".join(b.semantic_name for b in r.list_blocks())


def test_each_directive(reg: rampart.BlockRegistry, five: list[str]) -> None:
    a, b, c, d, e = five
    assert reg.promote(e, steps=2) == 2 and names(reg) == "abecd"
    assert reg.promote(e, steps=-1) == 3 and names(reg) == "abced"
    assert reg.promote(a, to_position=2) == 2 and names(reg) == "bcaed"
    assert reg.promote(d, before=b) == 0 and names(reg) == "dbcae"
    assert reg.promote(d, after=e) == 4 and names(reg) == "bcaed"
    assert reg.promote(d, to_front=True) == 0 and names(reg) == "dbcae"
    assert reg.promote(d, to_back=True) == 4 and names(reg) == "bcaed"
    assert reg.demote(b) == 1 and names(reg) == "cbaed"
    assert reg.promote_to_front(e) == 0 and names(reg) == "ecbad"
    assert reg.demote_to_back(e) == 4 and names(reg) == "cbade"
    assert reg.promote(c, before=c) == 0 and names(reg) == "cbade"


def test_positions_clamp(reg: rampart.BlockRegistry, five: list[str]) -> None:
    a, _, _, _, e = five
    assert reg.promote(e, steps=100) == 0
    assert reg.promote(e, steps=-100) == 4
    assert reg.promote(a, to_position=-7) == 0
    assert reg.promote(a, to_position=99) == 4
    assert reg.demote(a, 10) == 4


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"steps": 1, "to_front": True}, {"to_position": 0, "before": "x"}, {"to_back": False}],
)
def test_exactly_one_directive(
    reg: rampart.BlockRegistry, five: list[str], kwargs: dict[str, object]
) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        reg.promote(five[0], **kwargs)  # type: ignore[arg-type]
    assert names(reg) == "abcde"


def test_reorder(reg: rampart.BlockRegistry, five: list[str]) -> None:
    a, b, c, d, e = five
    reg.reorder([d, b])
    assert names(reg) == "dbace"
    with pytest.raises(ValueError, match="twice"):
        reg.reorder([a, a])
    assert names(reg) == "dbace"


def test_promote_group_moves_one_contiguous_unit(
    reg: rampart.BlockRegistry, five: list[str]
) -> None:
    a, b, c, d, e = five
    assert reg.promote_group([e, b]) == 0 and names(reg) == "ebacd"
    assert reg.promote_group([a, c], to_position=1) == 1 and names(reg) == "eacbd"
    assert reg.promote_group([e, a], to_position=99) == 3 and names(reg) == "cbdea"


def test_unknown_ids(reg: rampart.BlockRegistry, five: list[str]) -> None:
    ghost = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(rampart.BlockNotFoundError) as info:
        reg.promote(ghost, to_front=True)
    assert isinstance(info.value, KeyError)
    assert reg.label in str(info.value) and ghost in str(info.value)
    with pytest.raises(KeyError):
        reg.promote(five[0], before=ghost)
    with pytest.raises(KeyError, match="not-an-id"):
        reg.promote_group([five[0], "not-an-id"])
    assert names(reg) == "abcde"
