"""The text input contract (genmetrics.data.text.inputs): a string or a sequence of strings becomes a list, an
empty text, a non-string item or a non-sequence is one ``InputError`` naming the input and the position."""

from __future__ import annotations

import pytest

from genmetrics.data.text.inputs import as_text_list
from genmetrics.errors import InputError


@pytest.mark.parametrize("texts", ["a cat", ["a cat", "a dog"], ("x",), []])
def test_strings_come_back_as_a_list_of_the_same_strings(texts):
    got = as_text_list(texts)
    assert got == ([texts] if isinstance(texts, str) else list(texts))
    assert as_text_list(got) == got  # idempotent


def test_empty_texts_only_where_allowed():
    assert as_text_list(["", " "], allow_empty=True) == ["", " "]
    with pytest.raises(InputError, match=r"^prompts\[1\]: the text is empty or whitespace only"):
        as_text_list(["ok", "\t\n"], name="prompts")


@pytest.mark.parametrize(
    "bad,says",
    [
        (None, "condition: expected a string or a list of strings, got NoneType"),
        (b"bytes", "condition: expected a string or a list of strings, got bytes"),
        (3, "condition: expected a string or a list of strings, got int"),
        (["a", 3], "condition[1]: expected a string, got int 3"),
        (["a", None], "condition[1]: expected a string, got NoneType None"),
    ],
)
def test_a_wrong_type_is_named_with_its_position(bad, says):
    with pytest.raises(InputError) as info:
        as_text_list(bad)
    assert str(info.value) == says


def test_a_long_wrong_item_is_cut_short():
    with pytest.raises(InputError) as info:
        as_text_list([["x" * 1000]])
    assert len(str(info.value)) == 200
