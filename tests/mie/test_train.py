"""Training: the loss goes down on a few synthetic pairs, the checkpoint reloads to identical outputs,
and a run stopped after a checkpoint resumes to the same result as an uninterrupted one."""

import json

import pytest
import torch

from genmetrics.errors import InputError


def _opts(tmp_path, data, name, **kw):
    base = dict(data=str(data), out=str(tmp_path / name), backbone="tiny-qwen35", tuning="lora_layer", last_k=1,
                lr=3e-3, batch_pairs=2, grad_accum=1, subset=4, epochs=2, warmup=0.0, progress=False,
                save_every=10, lora_dropout=0.0, instruction="Judge the binding.")
    base.update(kw)
    return base


def test_loss_goes_down_reload_and_resume(tmp_path, pairs_file):
    from genmetrics.backbones.weights import load_state_dict
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.model import MIEModel
    from genmetrics.mie.train import latest_checkpoint, train_mie

    straight = train_mie(**_opts(tmp_path, pairs_file, "a"))
    losses = [h["loss"] for h in straight["history"]]
    assert straight["steps"] == 4 and straight["finished"]
    assert losses[-1] < 0.8 * losses[0]
    assert straight["history"][-1]["rank"] < straight["history"][0]["rank"]
    info = json.loads((tmp_path / "a" / "training.json").read_text())
    assert info["pairs"] == 4 and info["generators"] == ["gen_a", "gen_b"]

    # the checkpoint reloads (backbone rebuilt from its name) and ranks the training pairs
    model = MIEModel.from_pretrained(tmp_path / "a")
    recs = load_mib_pairs(pairs_file)
    a, b = model.score_pairs([[str(p) for p in r.references] for r in recs], [r.prompt for r in recs],
                             [str(r.candidates[0]) for r in recs], [str(r.candidates[1]) for r in recs])
    prefers_a = torch.tensor([r.preference == 0 for r in recs])
    assert ((a.score > b.score) == prefers_a).float().mean() >= 0.75

    # the same run stopped after step 3 (as if killed right after its checkpoint), then resumed
    first = train_mie(**_opts(tmp_path, pairs_file, "b", stop_after=3))
    assert first["steps"] == 3 and not first["finished"]
    assert not (tmp_path / "b" / "heads.safetensors").exists()
    assert latest_checkpoint(tmp_path / "b").name == "step_00000003"
    resumed = train_mie(**_opts(tmp_path, pairs_file, "b"))
    assert resumed["resumed_from"] is not None and resumed["steps"] == 4 and resumed["finished"]
    assert [h["loss"] for h in resumed["history"]] == pytest.approx(losses, rel=1e-4, abs=1e-5)
    sa = load_state_dict(tmp_path / "a" / "heads.safetensors")
    sb = load_state_dict(tmp_path / "b" / "heads.safetensors")
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], atol=1e-5, rtol=1e-4)


def test_layer_only_and_bad_options(tmp_path, pairs_file):
    from genmetrics.mie.train import TrainConfig, lr_lambda, train_mie

    res = train_mie(**_opts(tmp_path, pairs_file, "lo", tuning="layer_only", epochs=1, subset=2, beta=0.0))
    assert res["steps"] == 1 and not (tmp_path / "lo" / "adapter").exists()
    assert res["history"][0]["diag"] == 0.0
    with pytest.raises(InputError, match="tuning"):
        TrainConfig(data="x", out="y", tuning="full").check()
    with pytest.raises(InputError, match="does not exist"):
        train_mie(**_opts(tmp_path, tmp_path / "missing.jsonl", "bad"))
    f = lr_lambda(10, 2)
    assert f(0) == 0.5 and f(1) == 1.0 and f(2) == pytest.approx(1.0) and f(10) == pytest.approx(0.0)
    assert f(6) == pytest.approx(0.5)


def test_loss_formula():
    import torch.nn.functional as F

    from genmetrics.mie.model import MIEOutput, mie_loss

    w = MIEOutput(torch.tensor([1.0, 0.0]), torch.tensor([[2.0, -1.0, 0.0], [0.5, 0.5, 0.5]]))
    lo = MIEOutput(torch.tensor([0.0, 2.0]), torch.tensor([[0.0, 1.0, -3.0], [1.0, 1.0, 1.0]]))
    tw = torch.tensor([[0.9, 0.2, 0.5], [1.0, 1.0, 1.0]])
    tl = torch.tensor([[0.1, 0.7, 0.5], [0.0, 0.0, 0.0]])
    loss, parts = mie_loss(w, lo, tw, tl, alpha=0.7, beta=0.3, diag_mask=torch.tensor([True, False]))
    rank = (-F.logsigmoid(torch.tensor(1.0)) - F.logsigmoid(torch.tensor(-2.0))) / 2
    diag = F.binary_cross_entropy_with_logits(torch.cat([w.diagnostics[:1], lo.diagnostics[:1]]), torch.cat([tw[:1], tl[:1]]))
    assert loss.item() == pytest.approx((0.7 * rank + 0.3 * diag).item(), rel=1e-6)
    assert parts["rank"] == pytest.approx(rank.item(), rel=1e-6) and parts["diag"] == pytest.approx(diag.item(), rel=1e-6)
