"""Does MIE learn to use its references? Procedural multi-subject pairs, a small random Qwen3.5 on the CPU,
trained through the project's own trainer (genmetrics.mie.train -> genmetrics.train.fit).

Three tasks, one per diagnostic dimension; every pair has 2 reference subjects (coloured squares) and two
candidates that differ in exactly one way:

* ``existence``: the worse candidate lacks one of the subjects;
* ``appearance``: one subject of the worse candidate is recoloured (to a colour of neither reference),
  nothing else changed; both candidates show two distinct random palette colours, so any metric that
  looks at the candidate alone is at chance by construction;
* ``interaction``: the prompt says which subject is left of the other; the worse candidate has them
  swapped (also at chance for a candidate-only metric: it needs the references and the prompt).

Reported on held-out pairs (per task): pairwise accuracy and balanced accuracy of the task's diagnostic
dimension, before training, after training, and after giving every held-out pair another pair's references.
One model per task (layer_only, lr 2e-3: a random 64-wide model needs far more than the paper's 2e-5 for
a pretrained 0.8B). Prints one JSON line. ``python benchmarks/mie_learnability.py [--tasks appearance]``.

The palette is shared by training and test, so a model can pass these tasks by memorising which colours
go together; ``benchmarks/mie_generalisation.py`` draws every identity fresh.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = ("existence", "appearance", "interaction")
PALETTE = [
    (230, 30, 30),
    (30, 200, 40),
    (40, 60, 230),
    (240, 220, 20),
    (220, 40, 220),
    (20, 220, 220),
    (250, 140, 0),
    (255, 255, 255),
]
BG = (110, 110, 110)
SIZE = 64


def _image(fill: tuple[int, int, int] | None, halves: tuple[Any, Any] = (None, None)) -> Any:
    """A reference (the whole image one subject colour) or a candidate (left half, right half; None = empty).
    Each half is exactly the 32 px columns that map to whole vision tokens of the tiny backbone (16 px
    patches merged 2x2), so a subject's colour reaches the language model in whole tokens."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (SIZE, SIZE), fill or BG)
    d = ImageDraw.Draw(im)
    for (x0, x1), c in zip(((0, SIZE // 2 - 1), (SIZE // 2, SIZE - 1)), halves):
        if c is not None:
            d.rectangle((x0, 0, x1, SIZE - 1), fill=c)
    return im


def make_pairs(folder: Path, task: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` pairs of ``task`` as MIB records (images written into ``folder``)."""
    rng = random.Random(f"{task}-{seed}")
    folder.mkdir(parents=True, exist_ok=True)
    recs = []
    for i in range(n):
        c1, c2, c3 = rng.sample(PALETTE, 3)
        stem = f"{task}_{seed}_{i}"
        refs = []
        for j, c in enumerate((c1, c2)):
            _image(c).save(folder / f"{stem}_ref{j}.png")
            refs.append(f"{stem}_ref{j}.png")
        first_left = rng.random() < 0.5
        good = (c1, c2) if first_left else (c2, c1)
        prompt = (
            "the first subject is left of the second"
            if first_left
            else "the first subject is right of the second"
        )
        if task == "existence":
            k = rng.randrange(2)
            bad = tuple(None if j == k else c for j, c in enumerate(good))
        elif task == "appearance":
            k = rng.randrange(2)
            bad = tuple(c3 if j == k else c for j, c in enumerate(good))
        else:
            bad = good[::-1]
        pref = rng.randrange(2)
        cands = [None, None]
        cands[pref], cands[1 - pref] = f"{stem}_good.png", f"{stem}_bad.png"
        _image(None, good).save(folder / cands[pref])
        _image(None, bad).save(folder / cands[1 - pref])
        dim = TASKS.index(task)
        lab_bad = [1.0, 1.0, 1.0]
        lab_bad[dim] = 0.0
        diags = [None, None]
        diags[pref], diags[1 - pref] = [1.0, 1.0, 1.0], lab_bad
        recs.append(
            {
                "id": stem,
                "prompt": prompt,
                "references": refs,
                "candidates": cands,
                "generators": ["good", "bad"] if pref == 0 else ["bad", "good"],
                "preference": pref,
                "diagnostics": diags,
                "bucket": {"task": task},
            }
        )
    return recs


def write_jsonl(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def evaluate(model: Any, records: list[Any], *, swap_refs: bool = False) -> dict[str, float]:
    """Pairwise accuracy and balanced accuracy of the task dimension on ``records`` (one task). With
    ``swap_refs`` pair i is scored against the references of pair i+1."""
    import numpy as np

    from genmetrics.mie.evaluate import diagnostic_agreement

    refs = [[str(p) for p in r.references] for r in records]
    if swap_refs:
        refs = refs[1:] + refs[:1]
    a, b = model.score_pairs(
        refs,
        [r.prompt for r in records],
        [str(r.candidates[0]) for r in records],
        [str(r.candidates[1]) for r in records],
    )
    prefers_a = np.array([r.preference == 0 for r in records])
    correct = ((a.score > b.score).numpy() == prefers_a).mean()
    task = records[0].bucket["task"]
    logits = np.concatenate([a.diagnostics.numpy(), b.diagnostics.numpy()])
    labels = np.concatenate([[r.diagnostics[0] for r in records], [r.diagnostics[1] for r in records]])
    agg = diagnostic_agreement(logits, labels)[task]
    return {
        "pairwise_accuracy": round(float(correct), 4),
        "balanced_accuracy": round(agg["balanced_accuracy"], 4),
    }


def run_task(
    task: str,
    *,
    pairs: int = 96,
    test_pairs: int = 32,
    epochs: int = 8,
    lr: float = 2e-3,
    tuning: str = "layer_only",
    batch_pairs: int = 8,
    text_layers: int = 4,
    seed: int = 0,
    workdir: str | None = None,
) -> dict[str, Any]:
    """Train one model on ``task`` and evaluate it on held-out pairs of the same task."""
    import torch

    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.model import MIEModel
    from genmetrics.mie.train import train_mie
    from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor

    tmp = Path(workdir or tempfile.mkdtemp(prefix="mie-learn-"))
    img = tmp / "img"
    data = write_jsonl(img / f"train_{task}.jsonl", make_pairs(img, task, pairs, seed))
    test = load_mib_pairs(
        write_jsonl(img / f"test_{task}.jsonl", make_pairs(img, task, test_pairs, seed + 1000))
    )
    proc = tiny_qwen35_processor()

    def backbone() -> Any:
        types = ["linear_attention"] * (text_layers - 1) + [
            "full_attention"
        ]  # ends in full attention, as Qwen3.5
        return tiny_qwen35(seed, text_config={"num_hidden_layers": text_layers, "layer_types": types})

    torch.manual_seed(seed)
    before = evaluate(MIEModel(backbone(), proc, tuning=tuning, unfreeze_layers=text_layers), test)
    res = train_mie(
        data=str(data),
        out=str(tmp / f"run_{task}"),
        vlm=backbone(),
        processor=proc,
        tuning=tuning,
        unfreeze_layers=text_layers,
        lr=lr,
        epochs=epochs,
        batch_pairs=batch_pairs,
        grad_accum=1,
        val_fraction=0.0,
        subset=None,
        warmup=0.03,
        seed=seed,
        progress=False,
        save_every=None,
        early_stopping_patience=None,
    )
    model = MIEModel.from_pretrained(res["checkpoint"], backbone(), proc)
    return {
        "steps": res["steps"],
        "before": before,
        "after": evaluate(model, test),
        "swapped_references": evaluate(model, test, swap_refs=True),
    }


def run(
    *,
    tasks: tuple[str, ...] = TASKS,
    pairs: int = 96,
    test_pairs: int = 32,
    epochs: int = 8,
    lr: float = 2e-3,
    tuning: str = "layer_only",
    text_layers: int = 4,
    seed: int = 0,
    workdir: str | None = None,
) -> dict[str, Any]:
    """One model per task (one task per diagnostic dimension); the summary JSON of the benchmark."""
    t0 = time.perf_counter()
    per = {
        t: run_task(
            t,
            pairs=pairs,
            test_pairs=test_pairs,
            epochs=epochs,
            lr=lr,
            tuning=tuning,
            text_layers=text_layers,
            seed=seed,
            workdir=workdir,
        )
        for t in tasks
    }
    out: dict[str, Any] = {
        "benchmark": "mie_learnability",
        "backbone": f"random tiny Qwen3.5 ({text_layers} text layers, hidden 64)",
        "tuning": tuning,
        "lr": lr,
        "epochs": epochs,
        "train_pairs_per_task": pairs,
        "test_pairs_per_task": test_pairs,
        "tasks": per,
    }
    if "appearance" in per:
        app = per["appearance"]
        out["goal_appearance"] = {
            "after>=0.80": app["after"]["pairwise_accuracy"] >= 0.80,
            "swapped<=0.60": app["swapped_references"]["pairwise_accuracy"] <= 0.60,
        }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=96, help="training pairs per task")
    ap.add_argument("--test-pairs", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--tuning", default="layer_only")
    ap.add_argument("--text-layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default=",".join(TASKS))
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print(
        json.dumps(
            run(
                pairs=a.pairs,
                test_pairs=a.test_pairs,
                epochs=a.epochs,
                lr=a.lr,
                tuning=a.tuning,
                text_layers=a.text_layers,
                seed=a.seed,
                tasks=tuple(a.tasks.split(",")),
            )
        )
    )


if __name__ == "__main__":
    main()
