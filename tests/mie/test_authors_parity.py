"""The authors' evaluator, re-implemented independently (plain transformers + peft, no genmetrics code),
writes a checkpoint in the authors' layout; genmetrics loads it and gives the same score and diagnostic
logits (fp32, 1e-5), for both tuning modes and 2 and 4 references. Also: the token ids equal the
processor's, and partial or unsafe checkpoints are refused."""

import json

import pytest
import torch
from _authors import authors_inputs, authors_score

from genmetrics.errors import InputError

# LoRA on every attention / MLP linear of the vision blocks and the language layers (the authors' unsloth
# finetune_vision + finetune_language + attention + mlp selection), written as its own regex here.
AUTHOR_REGEX = (
    r".*?(?:visual|language_model).*?(?:self_attn|linear_attn|attn|mlp)\.(?:q_proj|k_proj|v_proj|o_proj|"
    r"qkv|proj|in_proj_qkv|in_proj_z|in_proj_a|in_proj_b|out_proj|gate_proj|up_proj|down_proj|linear_fc1|"
    r"linear_fc2)"
)
TEXT = {"num_hidden_layers": 6}  # 6 language layers: the top 4 train, 2 stay frozen


#: the large-image tests need a longer context than the tiny config's 512 positions
LONG = {"max_position_embeddings": 4096}


def _base(seed=0, **text):
    from genmetrics.testing import tiny_qwen35_for_generation

    return tiny_qwen35_for_generation(seed, text_config={**TEXT, **text})


class AuthorsMIE(torch.nn.Module):
    """What the authors' mie/model.py computes, in plain transformers + peft."""

    def __init__(self, mode, processor, seed=0, **text):
        super().__init__()
        base = _base(seed, **text)
        if mode == "lora_layer":
            from peft import LoraConfig, get_peft_model

            self.backbone = get_peft_model(
                base,
                LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none", target_modules=AUTHOR_REGEX),
            )
        else:
            self.backbone = base
            for p in base.parameters():
                p.requires_grad_(False)
        for layer in base.model.language_model.layers[-4:]:
            for p in layer.parameters():
                p.requires_grad_(True)
        h = base.config.text_config.hidden_size
        g = torch.Generator().manual_seed(seed + 7)
        self.score_head = torch.nn.Sequential(
            torch.nn.Linear(h, h // 2), torch.nn.GELU(), torch.nn.Linear(h // 2, 1)
        ).float()
        self.classification_head = torch.nn.Sequential(
            torch.nn.Linear(h, h // 2), torch.nn.GELU(), torch.nn.Linear(h // 2, 3)
        ).float()
        with torch.no_grad():  # every trained tensor away from its initial value, so each one matters
            for p in (
                [p for p in self.backbone.parameters() if p.requires_grad]
                + list(self.score_head.parameters())
                + list(self.classification_head.parameters())
            ):
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
        self.mode, self.processor = mode, processor

    def inputs(self, refs, prompt, cand):
        return authors_inputs(self.processor, refs, prompt, cand)

    def forward(self, refs, prompt, cand):
        return authors_score(
            self.backbone, self.score_head, self.classification_head, self.processor, refs, prompt, cand
        )

    def save(self, folder, legacy=False):
        folder.mkdir(parents=True)
        pre = "lens" if legacy else "mie"
        torch.save(
            {
                "score_head": self.score_head.state_dict(),
                "classification_head": self.classification_head.state_dict(),
            },
            folder / f"{pre}_heads.pt",
        )
        if self.mode == "lora_layer":
            self.backbone.save_pretrained(str(folder / "lora_adapter"))
        tb = {
            n: p.detach().float()
            for n, p in self.backbone.named_parameters()
            if p.requires_grad and "lora_" not in n
        }
        torch.save(tb, folder / "trainable_backbone.pt")
        (folder / f"{pre}_config.json").write_text(
            json.dumps(
                {
                    "base_model_name": "tiny/qwen3.5",
                    "mode": self.mode,
                    "num_error_classes": 3,
                    "unfreeze_layers": 4,
                }
            )
        )
        return len(tb)


@pytest.mark.parametrize("mode", ["layer_only", "lora_layer"])
def test_authors_checkpoint_loads_exactly(mode, proc, samples, tmp_path):
    from genmetrics.mie.model import MIEModel

    ref = AuthorsMIE(mode, proc).eval()
    n_layer_tensors = ref.save(tmp_path / "ckpt", legacy=(mode == "lora_layer"))
    model = MIEModel.from_pretrained(tmp_path / "ckpt", _base(0), proc)
    assert model.tuning == mode and model.unfreeze_layers == 4
    assert model.load_report["backbone"] == n_layer_tensors > 0
    if mode == "lora_layer":
        n_lora = sum(1 for n, _ in ref.backbone.named_parameters() if "lora_" in n)
        assert model.load_report["lora"] == n_lora > 0
        assert any("visual" in n for n in model.lora_parameter_names())  # the vision tower has LoRA too
    ours = model.score([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples])
    worst = 0.0
    for i, (refs, prompt, cand) in enumerate(samples):
        s, d = ref(refs, prompt, cand)
        torch.testing.assert_close(ours.score[i : i + 1], s, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.diagnostics[i : i + 1], d, atol=1e-5, rtol=1e-5)
        worst = max(
            worst, float((ours.score[i] - s[0]).abs()), float((ours.diagnostics[i] - d[0]).abs().max())
        )
    print(f"parity {mode}: max |genmetrics - authors| = {worst:.2e}")
    # a second load from genmetrics' own format gives the same numbers again
    model.save_pretrained(tmp_path / "own")
    again = MIEModel.from_pretrained(tmp_path / "own", _base(0), proc)
    torch.testing.assert_close(
        again.score([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]).score,
        ours.score,
        atol=0,
        rtol=0,
    )


def test_token_ids_equal_the_processors(proc):
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images

    model = MIEModel(_base(0), proc, tuning=None)
    im = random_images(4, 64, seed=2)
    im2 = random_images(1, 96, seed=3)[0]
    prompts = [
        "cat",
        "a cat",
        "A dog and a cat",
        " leading space",
        "trailing space ",
        "two  spaces",
        "newline\nin the prompt",
        "tab\there",
        "emoji \U0001f600 and accents caf\u00e9",
        "Chinese \u732b\u548c\u72d7",
        "numbers 123 and 4.5",
        "punctuation: (a), [b]; {c}!",
        "quotes 'single' and \"double\"",
        "Prompt: nested",
        "<not a tag>",
        "a very long prompt " * 12,
        "UPPER lower MiXeD",
        "x",
        "the cat is left of the dog, touching it",
        "ends with a period.",
    ]
    ref = AuthorsMIE("layer_only", proc)
    for k, p in enumerate(prompts):
        refs = [im[0], im2] if k % 2 else [im[0], im[1], im[2]]
        batch = model.prepare([refs], [p], [im[3]])
        expected = ref.inputs(refs, p, im[3])["input_ids"][0]
        assert batch.sequences[0].ids.tolist() == expected.tolist(), p


def test_partial_or_unsafe_checkpoints_are_refused(proc, tmp_path):
    from genmetrics.mie.model import MIEModel

    ref = AuthorsMIE("layer_only", proc)
    ref.save(tmp_path / "ok")
    tb = torch.load(tmp_path / "ok" / "trainable_backbone.pt", weights_only=True)
    # keys that match nothing (the classic silent strict=False no-op)
    bad = tmp_path / "renamed"
    ref.save(bad)
    torch.save(
        {"backbone." + k.replace("layers", "blocks"): v for k, v in tb.items()}, bad / "trainable_backbone.pt"
    )
    with pytest.raises(InputError, match="0 of"):
        MIEModel.from_pretrained(bad, _base(0), proc)
    # one tensor missing: partial
    part = tmp_path / "partial"
    ref.save(part)
    torch.save(dict(list(tb.items())[1:]), part / "trainable_backbone.pt")
    with pytest.raises(InputError, match="partial"):
        MIEModel.from_pretrained(part, _base(0), proc)
    # heads under other names (or for another hidden size): one error naming the head
    renamed = tmp_path / "heads_renamed"
    ref.save(renamed)
    torch.save(
        {
            "score_head": {"fc." + k: v for k, v in ref.score_head.state_dict().items()},
            "classification_head": ref.classification_head.state_dict(),
        },
        renamed / "mie_heads.pt",
    )
    with pytest.raises(InputError, match=r"score_head does not load.*missing tensors"):
        MIEModel.from_pretrained(renamed, _base(0), proc)
    # a pickle with code is not loaded
    unsafe = tmp_path / "unsafe"
    ref.save(unsafe)
    torch.save(
        {
            "score_head": ref.score_head.state_dict(),
            "classification_head": ref.classification_head.state_dict(),
            "extra": _Evil(),
        },
        unsafe / "mie_heads.pt",
    )
    with pytest.raises(InputError, match="weights_only"):
        MIEModel.from_pretrained(unsafe, _base(0), proc)
    # the mode needs files that are missing
    (tmp_path / "ok" / "trainable_backbone.pt").unlink()
    with pytest.raises(InputError, match="trainable_backbone.pt"):
        MIEModel.from_pretrained(tmp_path / "ok", _base(0), proc)


def test_authors_checkpoint_through_create_metric_and_the_cli(proc, samples, tmp_path, capsys):
    """``create_metric("mie", heads=DIR)`` and ``evaluate-human mie --heads DIR`` read the authors' layout
    (backbone named in their config, built by a provider) and give the re-implementation's numbers."""
    from PIL import Image

    import genmetrics as gm
    from genmetrics.backbones.provider import use_provider
    from genmetrics.cli.main import main

    ref = AuthorsMIE("lora_layer", proc).eval()
    ref.save(tmp_path / "ckpt", legacy=True)  # lens_config.json / lens_heads.pt

    def provider(kind, weights, **options):
        assert weights == "tiny/qwen3.5"  # the authors' base_model_name
        return (_base(0), proc) if kind == "vlm" else None

    names = {}
    for i, (refs, _, cand) in enumerate(samples):
        for j, im in enumerate([*refs, cand]):
            names[i, j] = f"s{i}_{j}.png"
            Image.fromarray(im.permute(1, 2, 0).numpy()).save(tmp_path / names[i, j])
    # pair k: sample k's references and prompt; candidates: sample k's and sample (k+1)'s
    lines = []
    for k in (0, 3):
        n_refs = len(samples[k][0])
        other = (k + 1) % 4
        lines.append(
            json.dumps(
                {
                    "id": f"pair{k}",
                    "prompt": samples[k][1],
                    "references": [names[k, j] for j in range(n_refs)],
                    "candidates": [names[k, n_refs], names[other, len(samples[other][0])]],
                    "generators": ["a", "b"],
                    "preference": 0,
                }
            )
        )
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = {
        k: [ref(samples[k][0], samples[k][1], c) for c in (samples[k][2], samples[(k + 1) % 4][2])]
        for k in (0, 3)
    }

    with use_provider(provider):
        metric = gm.create_metric("mie", heads=str(tmp_path / "ckpt"))
        metric.update(
            reference=[s[0] for s in samples],
            candidates=[s[2] for s in samples],
            condition=[s[1] for s in samples],
        )
        per = metric.per_sample()
        for i, s in enumerate(samples):
            score, diag = ref(*s)
            torch.testing.assert_close(
                per["scores"][i : i + 1].float(), score, atol=1e-5, rtol=1e-5
            )  # kept in float64
            torch.testing.assert_close(per["diagnostics"][i : i + 1].float(), diag, atol=1e-5, rtol=1e-5)
        rc = main(
            [
                "evaluate-human",
                "mie",
                "--data",
                str(tmp_path / "pairs.jsonl"),
                "--heads",
                str(tmp_path / "ckpt"),
                "--out",
                str(tmp_path / "eval"),
                "--n-boot",
                "10",
                "--json",
            ]
        )
    assert rc == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in (tmp_path / "eval" / "scores.jsonl").read_text().splitlines()]
    for row, k in zip(rows, (0, 3)):
        got = torch.tensor(row["scores"]["mie"])
        torch.testing.assert_close(got, torch.cat([e[0] for e in expected[k]]), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            torch.tensor(row["diagnostics"]["mie"]),
            torch.cat([e[1] for e in expected[k]]),
            atol=1e-5,
            rtol=1e-5,
        )


class _Evil:
    pass


# ---------------------------------------------------------------- image size
#: non-square images over 512 px (multiples of 32, so the processor keeps them as they are: the authors'
#: grids are the full-size ones); a processor whose own pixel budget (1024**2) does not shrink them
BIG_SIZES = [(800, 544), (544, 736), (960, 672), (608, 800), (832, 576)]


@pytest.fixture(scope="module")
def big_proc():
    from genmetrics.testing import tiny_qwen35_processor

    p = tiny_qwen35_processor(image_size=1024)
    p.tokenizer.model_max_length = 4096  # three such images take ~1500 tokens
    return p


@pytest.fixture(scope="module")
def big_samples():
    from PIL import Image

    g = torch.Generator().manual_seed(5)
    ims = [
        Image.fromarray(torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy())
        for w, h in BIG_SIZES
    ]
    return [([ims[0], ims[1]], "a dog and a cat on a sofa", ims[2]), ([ims[3]], "one friend", ims[4])]


def _shrink(im, size):
    """The 512 px bound written independently: longer side to ``size``, aspect kept, PIL bicubic."""
    from PIL import Image

    s = size / max(im.size)
    return im.resize((round(im.size[0] * s), round(im.size[1] * s)), Image.Resampling.BICUBIC)


def _grids(model, samples):
    batch = model.prepare([s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples])
    return sorted(tuple(i.grid.tolist()) for i in batch.images.values())


@pytest.mark.parametrize("mode", ["layer_only", "lora_layer"])
def test_large_non_square_images_score_as_the_authors_code(mode, big_proc, big_samples, tmp_path):
    """An authors'-layout checkpoint scores images over 512 px unresized, as their code does (1e-5; fp32:
    about 1e3 tokens of width 64 per forward, float32 rounding stays near 1e-6); ``image_size=512`` is the
    paper's bound: other token grids, the re-implementation's numbers on independently shrunk images."""
    from genmetrics.mie.model import MIEModel

    ref = AuthorsMIE(mode, big_proc, **LONG).eval()
    ref.save(tmp_path / "ckpt")
    model = MIEModel.from_pretrained(tmp_path / "ckpt", _base(0, **LONG), big_proc)
    assert model.image_size is None  # the authors' code never resizes
    assert _grids(model, big_samples) == sorted((1, h // 16, w // 16) for w, h in BIG_SIZES)
    args = ([s[0] for s in big_samples], [s[1] for s in big_samples], [s[2] for s in big_samples])
    ours = model.score(*args)
    shrunk = MIEModel.from_pretrained(tmp_path / "ckpt", _base(0, **LONG), big_proc, image_size=512)
    assert shrunk.image_size == 512 and _grids(shrunk, big_samples) != _grids(model, big_samples)
    small = shrunk.score(*args)
    for i, (refs, prompt, cand) in enumerate(big_samples):
        s, d = ref(refs, prompt, cand)
        torch.testing.assert_close(ours.score[i : i + 1], s, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.diagnostics[i : i + 1], d, atol=1e-5, rtol=1e-5)
        s5, d5 = ref([_shrink(r, 512) for r in refs], prompt, _shrink(cand, 512))
        torch.testing.assert_close(small.score[i : i + 1], s5, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(small.diagnostics[i : i + 1], d5, atol=1e-5, rtol=1e-5)
        assert float((s5 - s).abs()) > 1e-4  # the bound changes the input, hence the score
    # recorded in genmetrics' format and read back
    model.save_pretrained(tmp_path / "own")
    assert json.loads((tmp_path / "own" / "mie_config.json").read_text())["image_size"] is None
    again = MIEModel.from_pretrained(tmp_path / "own", _base(0, **LONG), big_proc)
    assert again.image_size is None
    torch.testing.assert_close(again.score(*args).score, ours.score, atol=0, rtol=0)
    shrunk.save_pretrained(tmp_path / "own512")
    assert MIEModel.from_pretrained(tmp_path / "own512", _base(0, **LONG), big_proc).image_size == 512


def test_image_size_reaches_the_metric_and_the_commands(big_proc, big_samples, tmp_path, capsys):
    """``create_metric("mie", image_size=...)``, ``genmetrics score mie --option image_size=...`` and
    ``evaluate-human mie --image-size``: default the checkpoint's (here the authors': unresized)."""
    import genmetrics as gm
    from genmetrics.backbones.provider import use_provider
    from genmetrics.cli.main import main
    from genmetrics.mie.model import MIEModel

    ref = AuthorsMIE("layer_only", big_proc, **LONG).eval()
    ref.save(tmp_path / "ckpt")
    refs, prompt, cand = big_samples[0]
    full = ref(refs, prompt, cand)[0]
    small = ref([_shrink(r, 512) for r in refs], prompt, _shrink(cand, 512))[0]
    for i, im in enumerate([*refs, cand]):
        (tmp_path / ("refs" if i < len(refs) else "gen")).mkdir(exist_ok=True)
        im.save(tmp_path / ("refs" if i < len(refs) else "gen") / f"im{i}.png")

    def provider(kind, weights, **options):
        return (_base(0, **LONG), big_proc) if kind == "vlm" else None

    with use_provider(provider):
        for option, expected in (({}, full), ({"image_size": 512}, small), ({"image_size": None}, full)):
            metric = gm.create_metric("mie", heads=str(tmp_path / "ckpt"), **option)
            metric.update(reference=[refs], candidates=[cand], condition=[prompt])
            torch.testing.assert_close(metric.per_sample()["scores"].float(), expected, atol=1e-5, rtol=1e-5)
        model = MIEModel(_base(0, **LONG), big_proc, tuning=None)
        assert gm.create_metric("mie", model=model, image_size="none").mie_model().image_size is None
        with pytest.raises(Exception, match="image_size"):
            gm.create_metric("mie", heads=str(tmp_path / "ckpt"), image_size=-3)
        for extra, expected in (([], full), (["--option", "image_size=512"], small)):
            rc = main(
                ["score", "mie", "--heads", str(tmp_path / "ckpt"), "--reference", str(tmp_path / "refs")]
                + ["--candidates", str(tmp_path / "gen"), "--condition", prompt, "--json", *extra]
            )
            out = capsys.readouterr()
            assert rc == 0, out.err
            got = torch.tensor(json.loads(out.out)["per_sample"]["scores"]).float()
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        (tmp_path / "pairs.jsonl").write_text(
            json.dumps(
                {
                    "id": "p0",
                    "prompt": prompt,
                    "references": [f"refs/im{i}.png" for i in range(len(refs))],
                    "candidates": [f"gen/im{len(refs)}.png", "refs/im0.png"],
                    "generators": ["a", "b"],
                    "preference": 0,
                }
            )
            + "\n"
        )
        for extra, expected in (([], full), (["--image-size", "512"], small)):
            rc = main(
                ["evaluate-human", "mie", "--data", str(tmp_path / "pairs.jsonl"), "--heads"]
                + [str(tmp_path / "ckpt"), "--out", str(tmp_path / f"eval{len(extra)}"), "--n-boot", "10"]
                + extra
            )
            assert rc == 0, capsys.readouterr().err
            row = json.loads((tmp_path / f"eval{len(extra)}" / "scores.jsonl").read_text().splitlines()[0])
            torch.testing.assert_close(
                torch.tensor(row["scores"]["mie"][:1]).float(), expected, atol=1e-5, rtol=1e-5
            )
        assert (
            main(["evaluate-human", "mie", "--data", str(tmp_path / "pairs.jsonl"), "--image-size", "x"]) == 2
        )
        assert "image_size" in capsys.readouterr().err
