"""Attribute text side of raclip / sad / pad / rsad / hcs with the per-text float64 cache against the earlier per-list float32 path (one JSON line).

Random open_clip text tower (default ViT-B-16-quickgelu, no download), the ``celeba-20`` attributes, the
texts one metric of each kind encodes: RA-CLIPScore's dual prompts (``"This is a photo of {}."`` /
``"... without {}."``, 40 texts) and HCS's ``"a photo of {}"`` plus the bare strings (``text_center="bare"``,
40 texts).

* ``before``: the earlier path -- ``model.encode_text`` on the full 77-token context in
  the model's precision (float32), once per attribute list (a cache keyed by the whole list);
* ``after``: :class:`genmetrics.backbones.openclip.TextEmbeddingCache` as the metrics use it -- each
  distinct text once, the context cut after the longest text of the call, the text tower in float64;
* ``after_model_precision``: the same cut in float32 (for comparison; the raclip family does not use it).

Times are medians of ``--rounds`` interleaved rounds (fresh caches each round). Errors are against
open_clip's untrimmed ``encode_text`` of a float64 copy of the text tower: ``*_vector_error`` on the
normalised vectors, ``*_hcs_error`` on HCS scores (Eq. 2, ``text_center="bare"``) of random unit image
embeddings, where centring amplifies the text's rounding. ``texts_encoded_*`` counts the texts sent
through the tower when the same caches are asked for the celeba-20 lists twice (a second update) and
then for the celeba-28 lists (19 of its attributes are in celeba-20), as a scorer called with both lists
would be: before, each new list was encoded whole.

Usage: python benchmarks/attribute_text.py [--model ViT-B-16-quickgelu] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
import torch.nn.functional as F


def _hcs(img: torch.Tensor, c_img: torch.Tensor, t: torch.Tensor, c_text: torch.Tensor) -> torch.Tensor:
    return 100 * F.normalize(img - c_img, dim=-1) @ F.normalize(t - c_text, dim=-1).T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-16-quickgelu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import open_clip

    from genmetrics.backbones.openclip import TextEmbeddingCache, tokenize
    from genmetrics.raclip.attributes import resolve_attributes
    from genmetrics.raclip.model import HCS_TEMPLATE, NEGATIVE_TEMPLATE, POSITIVE_TEMPLATE

    torch.manual_seed(0)
    model = open_clip.create_model(args.model, pretrained=None).eval()
    tok = open_clip.get_tokenizer(args.model)
    attrs, attrs28 = resolve_attributes("celeba-20"), resolve_attributes("celeba-28")

    def lists(
        a: list[str],
    ) -> list[list[str]]:  # raclip's dual prompts in one call; hcs: prompts, bare strings
        return [
            [POSITIVE_TEMPLATE.format(x) for x in a] + [NEGATIVE_TEMPLATE.format(x) for x in a],
            [HCS_TEMPLATE.format(x) for x in a],
            list(a),
        ]

    calls = lists(attrs)

    def before() -> list[torch.Tensor]:
        with torch.no_grad():
            return [model.encode_text(tokenize(tok, t)).float() for t in calls]

    def after(dtype: torch.dtype | None) -> list[torch.Tensor]:
        cache = TextEmbeddingCache(dtype=dtype)
        return [cache.embed(model, tok, t) for t in calls]

    runs: dict[str, list[float]] = {"before": [], "after": [], "after_model_precision": []}
    out: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():  # warm-up (one short text per path)
        model.encode_text(tokenize(tok, ["x"]))
    TextEmbeddingCache(dtype=torch.float64).embed(model, tok, ["x"])
    for _ in range(args.rounds):  # interleaved
        for key, fn in (
            ("before", before),
            ("after", lambda: after(torch.float64)),
            ("after_model_precision", lambda: after(None)),
        ):
            t0 = time.perf_counter()
            out[key] = fn()
            runs[key].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in runs.items()}

    # the reference: untrimmed encode_text of a float64 copy (image tower left out of the copy)
    visual, model.visual = model.visual, torch.nn.Identity()
    m64 = copy.deepcopy(model).double()
    model.visual = visual
    with torch.no_grad():
        ref = [m64.encode_text(tokenize(tok, t)) for t in calls]

    def vec_err(got: list[torch.Tensor]) -> float:
        return max(
            float((F.normalize(g.double(), dim=-1) - F.normalize(r, dim=-1)).abs().max())
            for g, r in zip(got, ref)
        )

    g = torch.Generator().manual_seed(1)
    e = F.normalize(torch.randn(256, ref[0].shape[-1], generator=g, dtype=torch.float64), dim=-1)
    img = e[:256]
    c_img = img.mean(0)
    hcs_ref = _hcs(img, c_img, ref[1], ref[2].mean(0))

    def hcs_err(got: list[torch.Tensor]) -> float:
        return float((_hcs(img, c_img, got[1].double(), got[2].double().mean(0)) - hcs_ref).abs().max())

    # texts encoded: the celeba-20 lists, again (a second update), then the celeba-28 lists
    cache = TextEmbeddingCache(dtype=torch.float64)
    requested = 0
    for a in (attrs, attrs, attrs28):
        for t in lists(a):
            cache.embed(model, tok, t)
            requested += len(t)
    before_encoded = sum(len(t) for t in lists(attrs)) + sum(len(t) for t in lists(attrs28))  # once per list

    ids = tokenize(tok, [t for c in calls for t in c])
    print(
        json.dumps(
            {
                "benchmark": "attribute_text",
                "model": args.model + " (random weights)",
                "attributes": "celeba-20",
                "threads": torch.get_num_threads(),
                "rounds": args.rounds,
                "texts_per_round": sum(len(t) for t in calls),
                "context": int(ids.shape[1]),
                "longest_text_tokens": int((ids != 0).sum(1).max()),
                "before_s": round(med["before"], 4),
                "after_s": round(med["after"], 4),
                "after_model_precision_s": round(med["after_model_precision"], 4),
                "after_over_before": round(med["after"] / med["before"], 3),
                "before_vector_error": vec_err(out["before"]),
                "after_vector_error": vec_err(out["after"]),
                "after_model_precision_vector_error": vec_err(out["after_model_precision"]),
                "before_hcs_error": hcs_err(out["before"]),
                "after_hcs_error": hcs_err(out["after"]),
                "after_model_precision_hcs_error": hcs_err(out["after_model_precision"]),
                "texts_requested": requested,
                "texts_encoded_before": before_encoded,
                "texts_encoded_after": cache.encoded,
                "all_s": {k: [round(x, 4) for x in v] for k, v in runs.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
