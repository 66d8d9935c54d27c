"""Named training recipes: the paper's appendix and the authors' released pipeline differ in
batch, accumulation, step cap, patience and image size. Each recipe's numbers, written here from the
sources (not read from the code), must reach the shared trainer; an option given explicitly wins; the
recipe is recorded with the run and the checkpoint."""

import json
import math
from pathlib import Path

import pytest

from genmetrics.cli.main import main

#: Appendix E: batch 4 per device x 8 accumulation, max epochs 3, patience 2, 512 px (aspect kept).
#: The released pipeline: effective batch 16 by accumulation (4 x 4), a 600 optimizer-step cap, patience 1,
#: images unresized (their mie/dataset.py; MIE_Inference/README.md: "stopped ... at its 600-optimizer-step
#: budget").
EXPECTED = {
    "paper": {"batch": 4, "accum": 8, "epochs": 3, "cap": None, "patience": 2, "image_size": 512},
    "released": {"batch": 4, "accum": 4, "epochs": 3, "cap": 600, "patience": 1, "image_size": None},
}


class _Stop(Exception):
    pass


@pytest.fixture()
def captured(monkeypatch):
    """Replace the trainer by a recorder: the options train_mie hands it, and the model it would train."""
    seen = {}

    def fake_fit(task, train, loop, val_examples=None):
        seen.update(loop=loop, n_train=len(train), model=task.model, cfg=task.cfg)
        raise _Stop

    monkeypatch.setattr("genmetrics.mie.train.fit", fake_fit)
    return seen


@pytest.fixture(scope="module")
def many_pairs(tmp_path_factory):
    """4000 pairs over the same few images (nothing is decoded before training starts)."""
    from _data import write_pairs

    folder = tmp_path_factory.mktemp("many")
    small = write_pairs(folder, 2, refs=(2,))
    line = small.read_text().splitlines()[0]
    big = folder / "many.jsonl"
    rows = []
    for i in range(4000):
        rec = json.loads(line)
        rec["id"] = f"p{i}"
        rows.append(json.dumps(rec))
    big.write_text("\n".join(rows) + "\n")
    return big


def _expected_steps(recipe, n_train):
    e = EXPECTED[recipe]
    per_epoch = math.ceil(math.ceil(n_train / e["batch"]) / e["accum"])  # one process
    total = e["epochs"] * per_epoch
    return min(total, e["cap"]) if e["cap"] is not None else None


@pytest.mark.parametrize("recipe", ["paper", "released"])
def test_each_recipes_numbers_reach_the_trainer(recipe, many_pairs, captured, provider, tmp_path):
    from genmetrics.mie.train import train_mie

    e = EXPECTED[recipe]
    kw = {} if recipe == "paper" else {"recipe": recipe}  # the paper recipe is the default
    with pytest.raises(_Stop):
        train_mie(data=str(many_pairs), out=str(tmp_path / "run"), unfreeze_layers=1, progress=False, **kw)
    loop, n = captured["loop"], captured["n_train"]
    assert n == 3600  # 10% of 4000 held out for validation
    assert (loop.batch_size, loop.grad_accum, loop.epochs) == (e["batch"], e["accum"], e["epochs"])
    assert loop.max_steps == _expected_steps(recipe, n)
    if recipe == "released":
        assert loop.max_steps == 600  # 3 epochs would be 675 steps: the cap ends the run
    assert loop.early_stopping_patience == e["patience"]
    assert captured["model"].image_size == e["image_size"]
    assert loop.extra["recipe"] == recipe and captured["cfg"].recipe == recipe


def test_explicit_options_win_and_the_command_line_takes_the_recipe(many_pairs, captured, provider, tmp_path):
    from genmetrics.mie.train import TrainConfig, train_mie

    with pytest.raises(_Stop):
        train_mie(
            data=str(many_pairs),
            out=str(tmp_path / "a"),
            recipe="released",
            grad_accum=2,
            max_steps=0,
            early_stopping_patience=0,
            unfreeze_layers=1,
        )
    loop = captured["loop"]
    assert (loop.grad_accum, loop.max_steps, loop.early_stopping_patience) == (2, None, None)
    assert (loop.batch_size, captured["model"].image_size) == (4, None)  # the rest from the recipe
    # a recipe given on top of a config re-fills the knobs the call does not give
    with pytest.raises(_Stop):
        train_mie(
            TrainConfig(data=str(many_pairs), out=str(tmp_path / "b"), unfreeze_layers=1), recipe="released"
        )
    assert (captured["loop"].grad_accum, captured["loop"].max_steps) == (4, 600)
    base = ["train", "mie", "--data", str(many_pairs), "--unfreeze-layers", "1"]
    for extra, expected in (
        (["--recipe", "released"], (4, 600, 1, None)),
        # the cap reaches the loop as given; with 8 micro-batches per step the loop stops after 3 epochs of
        # ceil(900 / 8) steps = 339, under the cap (TrainLoopConfig.max_steps: tests/train/test_max_steps.py)
        (["--recipe", "released", "--grad-accum", "8", "--image-size", "256"], (8, 600, 1, 256)),
        ([], (8, None, 2, 512)),
        (["--patience", "0", "--max-steps", "7"], (8, 7, None, 512)),
    ):
        with pytest.raises(_Stop):
            main([*base, "--out", str(tmp_path / f"cli{len(extra)}"), *extra])
        loop = captured["loop"]
        got = (loop.grad_accum, loop.max_steps, loop.early_stopping_patience, captured["model"].image_size)
        assert got == expected, extra
    assert main([*base, "--out", str(tmp_path / "bad"), "--recipe", "appendix"]) == 2


def test_the_help_states_each_recipes_numbers():
    """The numbers the help text shows are the recipes' (cli.py cannot import them: it stays torch-free)."""
    from click.testing import CliRunner

    from genmetrics.mie.cli import train_cmd
    from genmetrics.mie.train import RECIPES

    text = " ".join(CliRunner().invoke(train_cmd, ["--help"], terminal_width=400).output.split())
    for flag, field in (
        ("--batch-pairs", "batch_pairs"),
        ("--grad-accum", "grad_accum"),
        ("--epochs", "epochs"),
        ("--max-steps", "max_steps"),
        ("--patience", "early_stopping_patience"),
        ("--image-size", "image_size"),
    ):
        p, r = (getattr(RECIPES[k], field) for k in ("paper", "released"))
        words = f"[recipe: paper {'none' if p is None else p}, released {'none' if r is None else r}]"
        assert words in text, (flag, words)


def test_a_released_run_records_its_recipe(tmp_path, pairs_file, proc):
    """A real (short) run: the trainer's own record agrees with the recipe and with its arithmetic."""
    from conftest import tiny_backbone

    from genmetrics.mie.train import train_mie

    res = train_mie(
        data=str(pairs_file),
        out=str(tmp_path / "run"),
        recipe="released",
        vlm=tiny_backbone(0),
        processor=proc,
        unfreeze_layers=1,
        val_fraction=0.25,
        epochs=1,
        progress=False,
        save_every=None,
    )
    record = json.loads((Path(res["out"]) / "train_config.json").read_text())
    assert record["options"]["grad_accum"] == 4 and record["options"]["early_stopping_patience"] == 1
    assert record["options"]["extra"]["recipe"] == "released" and res["recipe"] == "released"
    assert record["derived"]["steps_per_epoch"] == math.ceil(math.ceil(res["n_train"] / 4) / 4)
    assert res["steps"] == record["derived"]["total_steps"] == 1
    ckpt = Path(res["checkpoint"])
    assert json.loads((ckpt / "training.json").read_text())["config"]["recipe"] == "released"
    assert json.loads((ckpt / "mie_config.json").read_text())["image_size"] is None
