"""Two gloo processes with batch_size b train exactly like one process with batch_size 2b."""

from __future__ import annotations

import pytest
import torch

from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data, params


def _cfg(out, batch_size, **kw):
    return TrainLoopConfig(
        out_dir=out,
        lr=0.05,
        epochs=2,
        batch_size=batch_size,
        grad_accum=2,
        warmup_ratio=0.1,
        max_grad_norm=0.5,
        seed=11,
        progress=False,
        **kw,
    )


def _worker(rank, world_size, out):
    import os

    os.environ["LOCAL_RANK"] = str(rank)
    res = fit(Toy(), make_data(24), _cfg(out, 2), val_examples=make_data(5, seed=2))
    return res.history, params(res.module), res.config["derived"]["global_batch"], res.best_step


@pytest.mark.distributed
def test_two_processes_equal_one(tmp_path):
    from genmetrics.testing import spawn_gloo

    single = fit(Toy(), make_data(24), _cfg(tmp_path / "one", 4), val_examples=make_data(5, seed=2))
    assert single.steps == 6  # 24 examples / (4 x 2 accumulation) x 2 epochs
    ref = params(single.module)
    results = spawn_gloo(_worker, 2, (str(tmp_path / "two"),))
    for history, weights, global_batch, best_step in results:
        assert global_batch == 8 == single.config["derived"]["global_batch"]
        assert [r["kind"] for r in history] == [r["kind"] for r in single.history]
        for a, b in zip(history, single.history):
            assert a.keys() == b.keys()
            for k in a:
                if isinstance(b[k], (int, float)) and not isinstance(b[k], bool):
                    assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), (a["step"], k)
                else:  # the row kind and other non-numeric extras
                    assert a[k] == b[k], (a["step"], k)
        assert best_step == single.best_step
        for k in ref:
            torch.testing.assert_close(weights[k], ref[k], atol=1e-6, rtol=1e-5)
    assert (tmp_path / "two" / "final" / "trainable.safetensors").is_file()
    assert (tmp_path / "two" / "train_result.json").is_file()


def _resume_worker(rank, world_size, out, resume):
    import os

    # the resumed run is compared bit for bit with the full one: both at one intra-op thread, whatever the
    # environment gives a spawned process
    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = str(rank)
    cfg = TrainLoopConfig(
        out_dir=out,
        lr=0.05,
        epochs=2,
        batch_size=2,
        grad_accum=1,
        warmup_ratio=0.1,
        seed=5,
        save_every=2,
        keep_checkpoints=10,
        resume=resume,
        progress=False,
    )
    res = fit(Toy(dropout=0.3, init_seed=1 if not resume else 77), make_data(16), cfg)
    return res.history, params(res.module), str(res.resumed_from)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_run_resumes_exactly(tmp_path):
    """Two processes with dropout (each its own RNG stream): the run cut back to its step-2 checkpoint (what a
    kill right after it leaves, plus log rows written later) and resumed in two processes ends identical."""
    import shutil

    from genmetrics.testing import spawn_gloo

    out = tmp_path / "run"
    full = spawn_gloo(_resume_worker, 2, (str(out), False))
    assert len([r for r in full[0][0] if r["kind"] == "train"]) == 8  # 16 / (2 x 2) x 2 epochs
    for name in ("train_result.json", "final"):
        p = out / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for ck in (out / "checkpoints").iterdir():
        if int(ck.name.split("-")[1]) > 2:
            shutil.rmtree(ck)
    resumed = spawn_gloo(_resume_worker, 2, (str(out), True))
    for (h_full, p_full, _), (h_res, p_res, since) in zip(full, resumed):
        assert since.endswith("step-2")
        assert h_res == h_full
        for k in p_full:
            assert torch.equal(p_res[k], p_full[k]), k
