"""Training on the shared loop: the loss goes down, the checkpoint reloads to identical outputs, a run
killed mid-way resumes to the same result; the loss equations (rank sign, margin, each candidate's own
diagnostic targets) against explicit computations; a micro-batch without labels keeps the head in the graph."""

import json
from pathlib import Path

import pytest
import torch

from genmetrics.errors import InputError
from tests.reliability.hostile import Cases


def _opts(tmp_path, data, name, **kw):
    base = dict(
        data=str(data),
        out=str(tmp_path / name),
        tuning="lora_layer",
        unfreeze_layers=1,
        lr=3e-3,
        batch_pairs=2,
        grad_accum=1,
        subset=None,
        val_fraction=0.0,
        epochs=2,
        warmup=0.0,
        progress=False,
        save_every=1,
    )
    base.update(kw)
    return base


def _vlm(proc):
    from conftest import tiny_backbone

    return dict(vlm=tiny_backbone(0), processor=proc)


def test_loss_goes_down_reload_and_resume(tmp_path, pairs_file, proc):
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.model import MIEModel
    from genmetrics.mie.train import MIETask, train_mie

    recs = load_mib_pairs(pairs_file)[:4]
    sub = pairs_file.parent / "four.jsonl"
    sub.write_text("".join(line + "\n" for line in pairs_file.read_text().splitlines()[:4]))
    straight = train_mie(**_opts(tmp_path, sub, "a"), **_vlm(proc))
    losses = [h["loss"] for h in straight["history"] if h["kind"] == "train"]
    assert straight["steps"] == 4
    assert losses[-1] < 0.8 * losses[0]

    model = MIEModel.from_pretrained(
        straight["checkpoint"], **{"backbone": _vlm(proc)["vlm"], "processor": proc}
    )
    a, b = model.score_pairs(
        [[str(p) for p in r.references] for r in recs],
        [r.prompt for r in recs],
        [str(r.candidates[0]) for r in recs],
        [str(r.candidates[1]) for r in recs],
    )
    prefers_a = torch.tensor([r.preference == 0 for r in recs])
    assert ((a.score > b.score) == prefers_a).float().mean() >= 0.75

    class Killed(MIETask):  # dies in its 3rd micro-batch (after the checkpoint of step 2)
        calls = 0

        def loss(self, module, x):
            Killed.calls += 1
            if Killed.calls == 3:
                raise KeyboardInterrupt
            return super().loss(module, x)

    with pytest.raises(KeyboardInterrupt):
        train_mie(**_opts(tmp_path, sub, "b"), **_vlm(proc), task_cls=Killed)
    resumed = train_mie(**_opts(tmp_path, sub, "b", resume=True), **_vlm(proc))
    assert resumed["resumed_from"] is not None and resumed["steps"] == 4
    again = [h["loss"] for h in resumed["history"] if h["kind"] == "train"]
    assert again == pytest.approx(losses, rel=1e-4, abs=1e-5)
    other = MIEModel.from_pretrained(resumed["checkpoint"], _vlm(proc)["vlm"], proc)
    b2 = other.score_pairs(
        [[str(p) for p in r.references] for r in recs],
        [r.prompt for r in recs],
        [str(r.candidates[0]) for r in recs],
        [str(r.candidates[1]) for r in recs],
    )[1]
    torch.testing.assert_close(b2.score, b.score, atol=1e-5, rtol=1e-4)


def test_validation_split_early_stopping_and_bad_options(tmp_path, pairs_file, proc):
    from genmetrics.mie.train import TrainConfig, train_mie

    res = train_mie(
        **_opts(
            tmp_path,
            pairs_file,
            "lo",
            tuning="layer_only",
            epochs=3,
            val_fraction=0.25,
            early_stopping_patience=1,
            early_stopping_min_delta=10.0,
        ),
        **_vlm(proc),
    )
    evals = [h for h in res["history"] if h["kind"] == "eval"]
    assert res["n_val"] == 2 and res["n_train"] == 6
    assert res["stopped_early"] and len(evals) == 2  # min_delta 10: epoch 2 is "no better", patience 1 stops
    assert "pairwise_accuracy" in evals[0] and res["checkpoint"].endswith("best")

    loop = json.loads((Path(res["out"]) / "train_config.json").read_text())["options"]  # what the trainer ran
    assert (loop["scheduler"], loop["metric_for_best"], loop["greater_is_better"]) == (
        "cosine",
        "loss",
        False,
    )
    assert (loop["lr"], loop["max_grad_norm"], loop["weight_decay"]) == (3e-3, 1.0, 0.01)
    with pytest.raises(InputError, match="tuning"):
        TrainConfig(data="x", out="y", tuning="full").check()
    with pytest.raises(InputError, match="rank_loss"):
        TrainConfig(data="x", out="y", rank_loss="hinge").check()
    with pytest.raises(InputError, match="does not exist"):
        train_mie(**_opts(tmp_path, tmp_path / "missing.jsonl", "bad"))


def test_defaults_are_appendix_e():
    from genmetrics.mie.train import TrainConfig

    c = TrainConfig(data="x", out="y")
    assert (c.lr, c.weight_decay, c.warmup, c.grad_clip, c.batch_pairs, c.grad_accum, c.epochs, c.seed) == (
        2e-5,
        0.01,
        0.03,
        1.0,
        4,
        8,
        3,
        3407,
    )
    assert (c.alpha, c.beta, c.margin, c.rank_loss, c.tuning, c.unfreeze_layers) == (
        1.0,
        0.5,
        0.1,
        "margin",
        "layer_only",
        4,
    )
    assert (c.early_stopping_patience, c.early_stopping_min_delta, c.image_size) == (2, 1e-3, 512)
    assert (c.lora_r, c.lora_alpha, c.lora_dropout, c.subset, c.backbone) == (16, 32, 0.0, 9600, "0.8b")
    from genmetrics.mie.model import LORA_DEFAULTS, UNFREEZE_LAYERS

    assert (LORA_DEFAULTS, UNFREEZE_LAYERS) == (
        {"r": 16, "alpha": 32, "dropout": 0.0},
        4,
    )  # MIEModel's own defaults


def test_task_loss_uses_each_candidates_own_targets_and_references(make_model, pairs_file):
    """The training loss of a micro-batch of several pairs equals the loss written out from each candidate
    scored alone against its own pair's references, with its own diagnostic labels."""
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.loss import mie_loss
    from genmetrics.mie.model import MIEOutput
    from genmetrics.mie.train import MIETask, TrainConfig

    recs = load_mib_pairs(pairs_file)[:4]
    for i, r in enumerate(recs):  # labels that differ per candidate and per pair
        object.__setattr__(r, "diagnostics", ((0.1 * i, 0.9, 0.3), (0.8, 0.05 * i, 0.6)))
    m = make_model("layer_only", unfreeze_layers=1)
    cfg = TrainConfig(data="x", out="y", beta=1.0)
    task = MIETask(m, cfg)
    with torch.no_grad():
        loss, parts = task.loss(m, task.collate(recs))
        win, lose, tw, tl = [], [], [], []
        for r in recs:
            refs = [[str(p) for p in r.references]]
            out = [m.score(refs, [r.prompt], [str(r.candidates[j])]) for j in (0, 1)]
            win.append(out[r.preference])
            lose.append(out[1 - r.preference])
            tw.append(r.diagnostics[r.preference])
            tl.append(r.diagnostics[1 - r.preference])
    cat = lambda xs: MIEOutput(torch.cat([x.score for x in xs]), torch.cat([x.diagnostics for x in xs]))  # noqa: E731
    expected, eparts = mie_loss(cat(win), cat(lose), torch.tensor(tw), torch.tensor(tl), beta=1.0)
    assert parts["rank"] == pytest.approx(eparts["rank"], abs=1e-5)
    assert parts["diag"] == pytest.approx(eparts["diag"], abs=1e-6)


def test_unlabelled_micro_batch_keeps_the_diagnostic_head_in_the_graph(make_model, pairs_file):
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.train import MIETask, TrainConfig

    recs = load_mib_pairs(pairs_file)[:2]
    for r in recs:
        object.__setattr__(r, "diagnostics", None)
    m = make_model("layer_only", unfreeze_layers=1).train()
    task = MIETask(m, TrainConfig(data="x", out="y"))
    loss, parts = task.loss(m, task.collate(recs))
    loss.backward()
    assert parts["diag"] == 0.0
    for (
        p
    ) in m.classification_head.parameters():  # a gradient (zero), not None: DDP finds every parameter used
        assert p.grad is not None and torch.count_nonzero(p.grad) == 0


def test_loader_workers_decode_as_the_main_process_does(tmp_path, pairs_file, proc):
    """The training loader's workers decode and preprocess (the task's collate): with 2 workers every file is
    decoded exactly as often as with 0 (each candidate once per epoch), and the losses are the same."""
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.train import train_mie
    from genmetrics.testing.pil_counts import count_pil

    recs = load_mib_pairs(pairs_file)
    files = sorted({str(p) for r in recs for p in (*r.references, *r.candidates)})
    cands = {str(p) for r in recs for p in r.candidates}
    losses, decodes = {}, {}
    for w in (0, 2):
        with count_pil() as c:
            res = train_mie(**_opts(tmp_path, pairs_file, f"w{w}", save_every=100, workers=w), **_vlm(proc))
        losses[w] = [h["loss"] for h in res["history"] if h["kind"] == "train"]
        decodes[w] = {f: c.decodes[f] for f in files}
        assert all(decodes[w][f] == 2 for f in cands)  # 2 epochs, each candidate in one pair
    assert decodes[0] == decodes[2]
    assert losses[0] == losses[2]


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-jsonl-dataset-malformed", "fault", "MIE training pairs: a malformed JSONL line names the file")
def _(ctx):
    from genmetrics.mie.train import load_training_pairs

    p = ctx.inp / "pairs.jsonl"
    p.write_text('{"id": "a"\n')
    ctx.freeze()
    ctx.refused(lambda: load_training_pairs(p), "pairs.jsonl")


test_hostile = HOSTILE.test()
