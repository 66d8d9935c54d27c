"""Two gloo processes (the DDP wrapper active) train MIE when one process's micro-batch has no diagnostic
labels and the other's has some, and end exactly where one process accumulating the same micro-batches
ends ("multi-GPU training works when a micro-batch has no diagnostic labels").

Without the zero gradient through the diagnostic head, the unlabelled process leaves that head out of its
graph and DDP (``find_unused_parameters=False``, the default) stops at the next forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

#: a 1-layer (full attention) tiny Qwen3.5: the smallest backbone that still has a language layer to train
TEXT = {"num_hidden_layers": 1, "layer_types": ["full_attention"]}


class _Recorder:
    """Keeps the task (and its model) of a train_mie run and whether each micro-batch had labels."""

    task = None
    labelled: list[bool] = []


def _task_cls():
    from genmetrics.mie.train import MIETask

    class Recording(MIETask):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            _Recorder.task = self

        def loss(self, module, x):
            _Recorder.labelled.append(bool(x["mask"].any()))
            return super().loss(module, x)

    return Recording


def _write_pairs(folder: Path) -> Path:
    """Two pairs of 32 px images with 2 references each; only pair 0 has diagnostic labels, so whichever
    way a step's two pairs fall on the two processes, one process has no labels and the other has some."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(2):
        names = []
        for j in range(4):
            name = f"p{i}_{j}.png"
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / name)
            names.append(name)
        rec = {
            "id": f"pair{i}",
            "prompt": f"subject {i} hugs the other",
            "references": names[:2],
            "candidates": names[2:],
            "generators": ["gen_a", "gen_b"],
            "preference": i % 2,
        }
        if i == 0:
            rec["diagnostics"] = [[0.9, 0.2, 0.8], [0.1, 0.7, 0.3]]
        lines.append(json.dumps(rec))
    (folder / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "pairs.jsonl"


def _train(data: str, out: str, grad_accum: int) -> dict:
    """train_mie on the tiny backbone: 1 pair per micro-batch, 2 epochs of 1 optimizer step each."""
    from genmetrics.mie.train import train_mie
    from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor

    _Recorder.labelled = []
    res = train_mie(
        data=data,
        out=out,
        vlm=tiny_qwen35(0, text_config=dict(TEXT)),
        processor=tiny_qwen35_processor(32),
        task_cls=_task_cls(),
        tuning="layer_only",
        unfreeze_layers=1,
        image_size=32,
        lr=1e-2,
        weight_decay=0.0,
        warmup=0.0,
        batch_pairs=1,
        grad_accum=grad_accum,
        epochs=2,
        subset=None,
        val_fraction=0.0,
        save_every=None,
        progress=False,
    )
    model = _Recorder.task.model
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rows = [{k: v for k, v in r.items() if k != "kind"} for r in res["history"] if r["kind"] == "train"]
    return {"params": trained, "history": rows, "labelled": list(_Recorder.labelled), "steps": res["steps"]}


def _worker(rank: int, world_size: int, data: str, out: str) -> dict:
    import os

    os.environ["LOCAL_RANK"] = str(rank)
    return _train(data, out, grad_accum=1)  # ~0.2 MB: more than a pipe holds (spawn_gloo reads while joining)


@pytest.mark.distributed
@pytest.mark.slow  # ~50 s here, most of it the start-up of two processes
def test_two_processes_with_an_unlabelled_micro_batch_equal_one_process(tmp_path):
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import spawn_gloo, tiny_qwen35, tiny_qwen35_processor

    data = str(_write_pairs(tmp_path))
    one = _train(
        data, str(tmp_path / "one"), grad_accum=2
    )  # the same micro-batches, accumulated in one process
    two = spawn_gloo(_worker, 2, (data, str(tmp_path / "two")))

    # the premise: in every step one process had no diagnostic label and the other had some
    assert two[0]["steps"] == two[1]["steps"] == one["steps"] == 2
    for step in range(2):
        assert sorted([two[0]["labelled"][step], two[1]["labelled"][step]]) == [False, True]

    torch.manual_seed(3407)  # train_mie's seed before it builds the heads
    init = MIEModel(
        tiny_qwen35(0, text_config=dict(TEXT)),
        tiny_qwen35_processor(32),
        tuning="layer_only",
        unfreeze_layers=1,
    )
    head = [n for n in one["params"] if n.startswith("classification_head.")]
    assert head and all(
        not torch.equal(one["params"][n], init.get_parameter(n)) for n in head
    )  # labels moved it
    for rank in range(2):
        assert two[rank]["params"].keys() == one["params"].keys()
        for n, ref in one["params"].items():
            torch.testing.assert_close(
                two[rank]["params"][n], ref, atol=1e-5, rtol=1e-5, msg=f"rank {rank}: {n}"
            )
        for a, b in zip(two[rank]["history"], one["history"], strict=True):
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (a["step"], k)
