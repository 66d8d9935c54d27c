"""Tokenising text for open_clip (genmetrics.backbones.clip_tokens): text that fits is never warned about, text
that does not is truncated by the tokenizer with the end token kept and one warning naming the count and the
first place, the padding id of each tokenizer kind, and trimming all-padding columns changes no row's tokens."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

from genmetrics.backbones.clip_tokens import pad_id, tokenize, trim_padding
from genmetrics.errors import InputError
from genmetrics.testing import tiny_clip


def _warnings(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(x.message) for x in w if issubclass(x.category, UserWarning)]


def test_text_that_fits_is_tokenised_as_the_tokenizer_does_without_a_warning():
    _, tok = tiny_clip()  # context 16
    texts = ["a cat", "a photo of a red car"]
    ids, msgs = _warnings(lambda: tokenize(tok, texts))
    assert msgs == [] and torch.equal(ids, tok(texts))


def test_long_text_is_cut_by_the_tokenizer_and_named_once():
    _, tok = tiny_clip()
    long = " ".join(["word"] * 40)
    texts = ["short", long, long + " more"]
    ids, msgs = _warnings(lambda: tokenize(tok, texts, name="prompts"))
    assert torch.equal(ids, tok(texts)) and int(ids[1, -1]) == tok.eot_token_id  # the end token kept
    assert len(msgs) == 1
    assert msgs[0].startswith("prompts: 2 text(s) exceed the text encoder's context of 16 tokens")
    assert f"(first: prompts[1] {long[:60]!r}, {len(tok.encode(long)) + 2} tokens)" in msgs[0]
    # de-duplicated texts: the caller's positions are counted and the first one named
    _, msgs = _warnings(lambda: tokenize(tok, ["short", long], name="prompts", positions=[[0], [4, 2, 7]]))
    assert "prompts: 3 text(s)" in msgs[0] and "first: prompts[2]" in msgs[0]


def test_a_bad_text_is_named():
    _, tok = tiny_clip()
    with pytest.raises(InputError, match=r"condition\[1\]: the text is empty"):
        tokenize(tok, ["ok", " "], name="condition")


class _HFWrapper:
    """open_clip's HFTokenizer shape: a callable with a wrapped transformers-like tokenizer."""

    context_length = 4

    class tokenizer:  # noqa: N801 - the attribute name open_clip uses
        pad_token_id = 9

        def __call__(self, text, truncation=False):
            return {"input_ids": text.split()}

    tokenizer = tokenizer()

    def __call__(self, texts):
        rows = [([1, *range(10, 10 + len(t.split())), 2] + [9] * 4)[:4] for t in texts]
        return torch.tensor(rows)


def test_pad_id_and_truncation_for_a_wrapped_tokenizer():
    assert pad_id(tiny_clip()[1]) == 0 and pad_id(_HFWrapper()) == 9 and pad_id(object()) is None
    ids, msgs = _warnings(lambda: tokenize(_HFWrapper(), ["a", "a b c d e"]))
    assert ids.shape == (2, 4) and len(msgs) == 1 and "first: text[1] 'a b c d e', 5 tokens" in msgs[0]


@pytest.mark.parametrize("seed", range(10))
def test_trim_padding_drops_only_columns_of_padding(seed):
    rng = random.Random(seed)
    pad = rng.choice([0, 7])
    lengths = [rng.randint(0, 9) for _ in range(rng.randint(1, 5))]
    ids = torch.full((len(lengths), 10), pad)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.tensor([rng.choice([1, 2, 3]) for _ in range(n)], dtype=torch.long)
    out = trim_padding(ids, pad)
    keep = max(max(lengths), 1)  # the written rule: up to the longest row, at least one column
    assert torch.equal(out, ids[:, :keep])
    assert trim_padding(ids, None) is ids


def test_an_all_padding_batch_keeps_one_column():
    ids = torch.zeros(3, 5, dtype=torch.long)
    assert torch.equal(trim_padding(ids, 0), ids[:, :1])
    assert trim_padding(torch.zeros(2, 0, dtype=torch.long), 0).shape == (2, 0)
