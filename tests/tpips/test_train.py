"""Training: Eq. 2 loss decreases, LoRA on the language tower only, adapters reload to identical outputs,
checkpoints resume, validation agreement is logged, and the CLI runs."""

from __future__ import annotations

import json

import pytest
import torch

from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.train import TrainConfig, build_model, soft_cross_entropy, train_tpips

from .conftest import SIZE, make_triplets


def _cfg(**kw):
    base = dict(
        lr=2e-3,
        batch_size=8,
        micro_batch_size=4,
        max_steps=3,
        image_size=SIZE,
        val_every=0,
        save_every=0,
        warmup_ratio=0.0,
        probe_layers=2,
        lora_dropout=kw.pop("lora_dropout", 0.05),
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_triplets(tmp_path_factory.mktemp("train"), n=8)


def test_soft_cross_entropy_matches_eq2():
    logits = torch.tensor([[0.2, -1.0, 3.0], [1.0, 1.0, 1.0]])
    votes = torch.tensor([[0.0, 1.0, 4.0], [2.0, 2.0, 1.0]])
    y = votes / votes.sum(1, keepdim=True)
    expected = -(y * torch.log_softmax(logits, 1)).sum(1)
    assert torch.allclose(soft_cross_entropy(logits, votes), expected)


def test_lora_on_language_tower_only(processor):
    from genmetrics.errors import InputError
    from genmetrics.testing import tiny_qwen3vl

    cfg = TrainConfig(variant="early", image_size=SIZE).resolved()
    model = build_model(cfg, tiny_qwen3vl(), processor)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and not any("visual" in n for n in trainable)
    assert all("lora_" in n or n == "fusion.register" for n in trainable)
    assert any("language_model" in n and "lora_A" in n for n in trainable)
    lora = [m for n, m in model.named_modules() if n.endswith("q_proj") and hasattr(m, "r")][0]
    assert lora.r["default"] == 16 and lora.scaling["default"] == 2.0  # alpha = 2r
    assert lora.lora_dropout["default"].p == 0.05
    wrapped = {
        n.rsplit(".", 1)[-1]
        for n, m in model.named_modules()
        if hasattr(m, "lora_A") and "language_model" in n
    }
    assert wrapped == {
        "q_proj",
        "k_proj",
        "v_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }  # the default, qkv-mlp
    every = build_model(
        TrainConfig(variant="late", lora_targets="all-linear").resolved(), tiny_qwen3vl(), processor
    )
    assert "o_proj" in {n.rsplit(".", 1)[-1] for n, m in every.named_modules() if hasattr(m, "lora_A")}
    with pytest.raises(InputError, match="lora_targets"):
        TrainConfig(lora_targets="qv").resolved()


def test_loss_goes_down_on_8_triplets(tmp_path, data, processor, images):
    from genmetrics.testing import tiny_qwen3vl

    res = train_tpips(
        data,
        tmp_path / "out",
        config=_cfg(max_steps=12),
        backbone=tiny_qwen3vl(),
        processor=processor,
        val_data=data,
        progress=False,
    )
    assert len(res.losses) == 12
    assert min(res.losses[-3:]) < res.losses[0] - 0.05, res.losses
    rows = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    log = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in log] == list(range(1, 13))
    assert log[0]["lr"] == pytest.approx(2e-3) and log[-1]["lr"] < log[0]["lr"] / 10  # cosine towards 0
    val = [r for r in rows if r["kind"] == "eval"]
    assert val[-1]["step"] == 12 and 0.0 <= val[-1]["agreement"] <= 1.0
    assert (res.best_dir / "tpips.json").is_file()
    assert not any(p.requires_grad for n, p in res.model.named_parameters() if "visual" in n)


@pytest.mark.parametrize("variant", ["late", "mid", "early", "triplet"])
def test_adapter_reloads_identical(tmp_path, data, processor, images, variant):
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_for_generation

    build = tiny_qwen3vl_for_generation if variant == "triplet" else tiny_qwen3vl
    res = train_tpips(
        data,
        tmp_path / "out",
        config=_cfg(variant=variant, max_steps=2),
        backbone=build(),
        processor=processor,
        progress=False,
    )
    files = {p.name for p in res.adapter_dir.iterdir()}
    assert {
        "adapter_config.json",
        "adapter_model.safetensors",
        "tpips.json",
        "tpips_head.safetensors",
    } <= files
    loaded = load_tpips(res.adapter_dir, backbone=build(), processor=processor)
    assert loaded.variant == variant
    if variant == "triplet":
        a = res.model.odd_one_out(images[:2], images[2:4], images[4:6], ["color", "overall"])
        b = loaded.odd_one_out(images[:2], images[2:4], images[4:6], ["color", "overall"])
    else:
        a = res.model.similarity(images[:3], images[3:6], ["color", "overall", "lighting"])
        b = loaded.similarity(images[:3], images[3:6], ["color", "overall", "lighting"])
    assert torch.equal(a, b), (a, b)
    fresh = (
        load_tpips(
            None,
            backbone=build(),
            processor=processor,
            variant="late" if variant == "triplet" else variant,
            image_size=SIZE,
        )
        if variant != "triplet"
        else None
    )
    if fresh is not None:  # the adapter actually changed the model
        assert not torch.equal(fresh.similarity(images[:3], images[3:6], ["color", "overall", "lighting"]), a)


@pytest.mark.parametrize("variant", ["late", "triplet"])
def test_resume_continues_identically(tmp_path, data, processor, monkeypatch, variant):
    """Killed after step 3 (checkpoint at step 2), resumed: the same losses and the same adapter as a run that
    was never stopped (the triplet variant also draws its permutations from the checkpointed RNG)."""
    from safetensors.torch import load_file

    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_for_generation
    from genmetrics.train import run_dir

    build = tiny_qwen3vl_for_generation if variant == "triplet" else tiny_qwen3vl
    cfg = _cfg(variant=variant, max_steps=4, save_every=2, batch_size=4, micro_batch_size=2)
    full = train_tpips(
        data, tmp_path / "full", config=cfg, backbone=build(), processor=processor, progress=False
    )
    real = run_dir.append_metrics

    def killed(out, row):
        if row.get("step") == 3 and row.get("kind") == "train":
            raise KeyboardInterrupt
        real(out, row)

    monkeypatch.setattr(run_dir, "append_metrics", killed)
    with pytest.raises(KeyboardInterrupt):
        train_tpips(data, tmp_path / "cut", config=cfg, backbone=build(), processor=processor, progress=False)
    monkeypatch.setattr(run_dir, "append_metrics", real)
    assert (tmp_path / "cut" / "checkpoints" / "step-2").is_dir()
    resumed = train_tpips(
        data, tmp_path / "cut", config=cfg, backbone=build(), processor=processor, resume=True, progress=False
    )
    assert len(resumed.losses) == 4 and resumed.steps == 4
    assert resumed.losses == pytest.approx(full.losses, rel=1e-5, abs=1e-6)
    for name in ("adapter_model.safetensors", "tpips_head.safetensors"):
        a = load_file(str(full.adapter_dir / name))
        b = load_file(str(resumed.adapter_dir / name))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_refuses_to_overwrite_and_bad_config(tmp_path, data, processor):
    from genmetrics.errors import InputError
    from genmetrics.testing import tiny_qwen3vl

    train_tpips(
        data,
        tmp_path / "o",
        config=_cfg(max_steps=1),
        backbone=tiny_qwen3vl(),
        processor=processor,
        progress=False,
    )
    with pytest.raises(InputError, match="finished run"):
        train_tpips(
            data, tmp_path / "o", config=_cfg(max_steps=1), backbone=tiny_qwen3vl(), processor=processor
        )
    with pytest.raises(InputError, match="variant"):
        TrainConfig(variant="fused").resolved()
    with pytest.raises(InputError, match="does not exist"):
        train_tpips(tmp_path / "missing.jsonl", tmp_path / "x", config=_cfg())


def test_cli_train_and_errors(tmp_path, data, tiny_folder):
    from genmetrics.cli.main import main

    out = tmp_path / "cli"
    rc = main(
        [
            "train",
            "tpips",
            "--data",
            str(data),
            "--out",
            str(out),
            "--weights",
            str(tiny_folder),
            "--variant",
            "late",
            "--max-steps",
            "2",
            "--batch-size",
            "4",
            "--micro-batch-size",
            "2",
            "--image-size",
            str(SIZE),
            "--lr",
            "1e-3",
        ]
    )
    assert rc == 0
    cfg = json.loads((out / "final" / "tpips.json").read_text())
    assert cfg["variant"] == "late" and cfg["base_weights"] == str(tiny_folder.resolve())
    assert (
        main(
            [
                "train",
                "tpips",
                "--data",
                str(tmp_path / "nope.jsonl"),
                "--out",
                str(tmp_path / "y"),
                "--weights",
                "/does/not/exist",
            ]
        )
        == 2
    )


def test_gradient_checkpointing_path(tmp_path, data, processor):
    from genmetrics.testing import tiny_qwen3vl

    res = train_tpips(
        data,
        tmp_path / "gc",
        config=_cfg(variant="mid", max_steps=2, gradient_checkpointing=True),
        backbone=tiny_qwen3vl(),
        processor=processor,
        progress=False,
    )
    assert all(torch.isfinite(torch.tensor(res.losses)))


def _ddp_worker(rank, world_size, data_path, out_dir):
    import os

    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    os.environ["LOCAL_RANK"] = str(rank)
    cfg = _cfg(max_steps=2, batch_size=4, micro_batch_size=1, lora_dropout=0.0, val_every=1)
    res = train_tpips(
        data_path,
        out_dir,
        config=cfg,
        backbone=tiny_qwen3vl(),
        processor=tiny_qwen3vl_processor(SIZE),
        val_data=data_path,
        progress=False,
    )
    from safetensors.torch import save_file

    # the weights go through a file: spawn_gloo's result pipe only takes small objects
    save_file(
        {n: p.detach().contiguous() for n, p in res.model.named_parameters() if p.requires_grad},
        f"{out_dir}/rank{rank}.safetensors",
    )
    return res.losses, res.val


@pytest.mark.distributed
def test_two_processes_train_like_one(tmp_path, data, processor):
    """DDP over 2 gloo processes (2 examples each, 2 accumulation micro-steps) = one process on all 4."""
    from genmetrics.testing import spawn_gloo, tiny_qwen3vl

    single = train_tpips(
        data,
        tmp_path / "one",
        config=_cfg(max_steps=2, batch_size=4, micro_batch_size=1, lora_dropout=0.0, val_every=1),
        backbone=tiny_qwen3vl(),
        processor=processor,
        val_data=data,
        progress=False,
    )
    ref = {n: p.detach() for n, p in single.model.named_parameters() if p.requires_grad}
    results = spawn_gloo(_ddp_worker, 2, (str(data), str(tmp_path / "ddp")))
    from safetensors.torch import load_file

    for rank, (losses, val) in enumerate(results):
        assert losses == pytest.approx(single.losses, rel=1e-4)
        assert val[-1]["agreement"] == pytest.approx(single.val[-1]["agreement"], abs=1e-9)
        params = load_file(str(tmp_path / "ddp" / f"rank{rank}.safetensors"))
        assert params.keys() == ref.keys()
        for n, p in ref.items():
            assert torch.allclose(params[n], p, atol=1e-5), n
    assert (tmp_path / "ddp" / "final" / "tpips.json").is_file()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_training_decodes_each_file_once_per_epoch_in_loader_workers(tmp_path, data, processor, num_workers):
    """The training loader's workers decode (the task's collate reads the batch's files): each file of the
    8 triplets opened at most twice and decoded once per epoch, and the run is the same for 0 and 2 workers."""
    from genmetrics.testing import tiny_qwen3vl
    from genmetrics.testing.pil_counts import count_pil

    files = sorted({str(p) for line in data.read_text().splitlines() for p in json.loads(line)["images"]})
    files = [str(data.parent / p) for p in files]
    runs = {}
    for w in sorted({0, num_workers}):
        with count_pil() as c:
            runs[w] = train_tpips(
                data,
                tmp_path / f"w{w}",
                config=_cfg(max_steps=2, num_workers=w),
                backbone=tiny_qwen3vl(),
                processor=processor,
                progress=False,
            )
        epochs = 2  # 8 triplets, batch 8: one step per epoch
        o_lo, o_hi, d_lo, d_hi = c.per_file(files)
        assert (d_lo, d_hi) == (epochs, epochs) and o_hi <= 2 * epochs
    assert runs[0].losses == runs[num_workers].losses
