import pytest

from genmetrics.errors import InputError
from genmetrics.raclip.attributes import list_attribute_sets, load_attribute_set, resolve_attributes

COUNTS = {"celeba-20": 20, "hcs-celeba-20": 20, "celeba-28": 28, "celeba-12-irrelevant": 12, "celeba-40": 40,
          "coco-80": 80, "imagenet-1k": 1000}


def test_shipped_sets():
    assert set(list_attribute_sets()) == set(COUNTS)
    for name, n in COUNTS.items():
        attrs = resolve_attributes(name)  # validated: no duplicates, no empties
        assert len(attrs) == n, name
    assert load_attribute_set("HCS_celeba_20")[16] == "wearing earlings"  # verbatim for parity with the 2024 code
    assert "wearing earrings" in load_attribute_set("celeba-20")
    assert load_attribute_set("imagenet-1k")[:2] == ["tench", "goldfish"]
    assert load_attribute_set("coco-80")[0] == "person"
    assert not set(load_attribute_set("celeba-28")) & set(load_attribute_set("celeba-12-irrelevant"))


def test_files_and_lists(tmp_path):
    f = tmp_path / "attrs.txt"
    f.write_text("# my attributes\nsmiling\n\n  wearing hat  \n", encoding="utf-8")
    assert resolve_attributes(str(f)) == ["smiling", "wearing hat"]
    assert resolve_attributes(f) == ["smiling", "wearing hat"]
    assert resolve_attributes(["a", "b"]) == ["a", "b"]
    assert resolve_attributes("smiling, wearing hat,") == ["smiling", "wearing hat"]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(InputError, match="lists no attributes"):
        resolve_attributes(str(tmp_path / "empty.txt"))
    with pytest.raises(InputError, match="does not exist"):
        resolve_attributes(str(tmp_path / "missing.txt"))
    with pytest.raises(InputError, match="did you mean 'celeba-20'"):
        resolve_attributes("celbea-20")
    with pytest.raises(InputError, match="duplicate"):
        resolve_attributes(["hat", "HAT"])
    with pytest.raises(InputError, match="empty"):
        resolve_attributes(["hat", " "])


def test_compact_set_names_are_accepted():
    from genmetrics.raclip.attributes import load_attribute_set

    assert load_attribute_set("celeba20") == load_attribute_set("celeba-20") == load_attribute_set("CelebA_20")
    assert len(load_attribute_set("coco80")) == 80
