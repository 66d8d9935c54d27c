"""genmetrics.raclip._checks.check_attributes: what an attribute list may be, and one error per bad input
naming the argument, the position and the fix."""

from __future__ import annotations

import pytest

from genmetrics.errors import InputError
from genmetrics.raclip._checks import check_attributes


@pytest.mark.parametrize(
    "given,expected",
    [
        ("smiling", ["smiling"]),  # a single string is one attribute
        (["smiling", "wearing hat"], ["smiling", "wearing hat"]),
        (("a", "b", "c"), ["a", "b", "c"]),
        (["  padded  "], ["  padded  "]),  # kept as given: the text encoder sees what the user wrote
    ],
)
def test_a_list_comes_back_in_order_and_unchanged(given, expected):
    got = check_attributes(given)
    assert got == expected and isinstance(got, list)
    assert check_attributes(got) == got  # what it accepts, it accepts again


@pytest.mark.parametrize(
    "bad,needle",
    [
        (None, "attrs: no attributes given; pass a list of strings"),
        ([], "attrs: the attribute list is empty; pass at least one attribute"),
        (42, "attrs: expected a list of strings, got int"),
        (b"smiling", "attrs: expected a list of strings, got bytes"),
        (["a", 3], "attrs[1]: expected a string, got int 3"),
        (["a", " \t"], "attrs[1]: the attribute is empty or whitespace only; remove it"),
    ],
)
def test_bad_lists_are_named_with_the_argument_and_position(bad, needle):
    with pytest.raises(InputError) as e:
        check_attributes(bad, name="attrs")
    assert str(e.value).startswith(needle)


@pytest.mark.parametrize("second", ["Smiling", "smiling ", " SMILING", "smiling"])
def test_duplicates_ignore_case_and_spacing_and_name_both_positions(second):
    with pytest.raises(InputError) as e:
        check_attributes(["smiling", "hat", second])
    msg = str(e.value)
    assert msg.startswith(f"attributes: duplicate attribute {second!r} at positions 0 and 2")
    assert "remove the duplicate" in msg


def test_inner_spacing_is_one_space_for_the_duplicate_check():
    with pytest.raises(InputError, match="positions 0 and 1"):
        check_attributes(["wearing  hat", "Wearing hat"])
    assert check_attributes(["wearing hat", "wearinghat"]) == ["wearing hat", "wearinghat"]
