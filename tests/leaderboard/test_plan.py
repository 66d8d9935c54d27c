"""genmetrics.leaderboard.plan: what a run will score (keys in canonical order, inputs per metric, options
resolved against the config's folder), file-list fingerprints, the run's device; refusals name the file and
line."""

from __future__ import annotations

import lb_fakes
import pytest
import torch
from lb_helpers import toml_config, write_images

from genmetrics.core.registry import Granularity
from genmetrics.errors import GenmetricsError, InputError
from genmetrics.leaderboard import SET_ID, build_plan, load_config
from genmetrics.leaderboard.plan import device_for_run, file_list_hash

SPY = '[[metrics]]\nname = "_lb_spy"\n'
SPY_SET = '[[metrics]]\nname = "_lb_spy"\n\n[[metrics]]\nname = "_lb_set"\n'


def test_keys_are_every_planned_row_in_canonical_order(small_set):
    cfg = toml_config(small_set, SPY_SET, extra='real = "refs"\n')
    plan = build_plan(load_config(cfg), check_construct=False)
    gens = [g.name for g in plan.generators]
    assert gens == ["mid", "bad", "good"]
    expected = []
    for mp in plan.metrics:  # metric, column, generator, id: written out
        for col in mp.columns:
            for g in gens:
                if mp.level is Granularity.SET:
                    expected.append((g, col.name, SET_ID))
                else:
                    expected += [(g, col.name, s.id) for s in sorted(mp.samples[g], key=lambda s: s.id)]
    assert plan.keys() == expected and len(set(expected)) == len(expected)
    assert len(expected) == 3 * 6 + 3  # six samples per generator, one set row each
    assert [plan.metric_of(c.name).spec.name for c in plan.columns()] == ["_lb_spy", "_lb_set"]


def test_file_list_hash_sees_additions_removals_and_sizes_not_order(tmp_path):
    files = []
    for i, size in enumerate((3, 5, 7)):
        f = tmp_path / f"{i:03d}.png"
        f.write_bytes(b"x" * size)
        files.append(f)
    h = file_list_hash(files)
    assert file_list_hash(files[::-1]) == h and len(h) == 16
    assert file_list_hash(files[:2]) != h
    extra = tmp_path / "003.png"
    extra.write_bytes(b"y")
    assert file_list_hash([*files, extra]) != h
    files[1].write_bytes(b"x" * 6)
    assert file_list_hash(files) != h
    files[1].write_bytes(b"z" * 5)  # same name and size: the list hash cannot tell (the input hashes can)
    assert file_list_hash(files) == h


def test_device_for_run_resolves_auto_and_refuses_a_missing_device(monkeypatch):
    assert device_for_run("cpu") == "cpu"
    assert device_for_run("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", "1")
        assert device_for_run("auto") == "cuda:1"
    with pytest.raises(GenmetricsError) as e:
        device_for_run("cuda:99", where="run.device")
    msg = str(e.value)
    assert msg.startswith("run.device = 'cuda:99': this machine has no such device (it has: cpu")
    assert msg.endswith('choose one of those, or "auto"')


def test_prompts_file_errors_name_file_line(small_set):
    (small_set / "p.jsonl").write_text('{"id": "s00", "prompt": "a"}\n{"id": "s00", "prompt": "b"}\n')
    cfg = toml_config(small_set, SPY, extra='prompts = "p.jsonl"\n')
    with pytest.raises(
        InputError, match=r"config\.toml:3: data\.prompts: p\.jsonl:2: id 's00' repeats line 1"
    ):
        build_plan(load_config(cfg))
    (small_set / "p.jsonl").write_text('{"id": "s00", "prompt": "a", "references": ["refs/nope.png"]}\n')
    cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_refsets"\n', extra='prompts = "p.jsonl"\n')
    write_images(small_set / "gen" / "one", ["s00"])
    cfg.write_text(
        cfg.read_text()
        .replace('images = "gen/mid"', 'images = "gen/one"')
        .replace(
            '[[generators]]\nname = "bad"\nimages = "gen/bad"\n\n[[generators]]\nname = "good"\nimages = "gen/good"\n\n',
            "",
        )
    )
    with pytest.raises(
        InputError, match=r"data\.prompts: p\.jsonl:1: reference image .*nope\.png.* does not exist"
    ):
        build_plan(load_config(cfg))


def test_cache_folder_and_path_options(small_set, tmp_path, monkeypatch):
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))
    (small_set / "weights").mkdir()
    metric = '[[metrics]]\nname = "_lb_vector"\n'
    build_plan(load_config(toml_config(small_set, metric + 'path = "weights"\n')), check_construct=True)
    assert lb_fakes.CALLS["cache_dir"] == str(tmp_path / "home" / "features")  # default: the shared cache
    assert lb_fakes.CALLS["path"] == str((small_set / "weights").resolve())  # relative to the config
    build_plan(
        load_config(toml_config(small_set, metric + 'path = "org/model"\n', extra="[run]\ncache = false\n"))
    )
    assert lb_fakes.CALLS["cache_dir"] is None and lb_fakes.CALLS["path"] == "org/model"  # a hub id stays
    build_plan(
        load_config(toml_config(small_set, metric + 'path = "./new"\n', extra='[run]\ncache = "feats"\n'))
    )
    assert lb_fakes.CALLS["cache_dir"] == str(small_set.resolve() / "feats")
    assert lb_fakes.CALLS["path"] == str((small_set / "new").resolve())


def test_metrics_wired_to_the_same_samples_share_one_list(tmp_path):
    """psnr and ssim take each image with its reference: the plan holds one list of samples per generator for
    both (equal to what each metric alone is wired to); a metric wired otherwise keeps its own."""
    from genmetrics.testing import toy_leaderboard

    cfg = toy_leaderboard(tmp_path, n=4, size=16)
    alone = build_plan(load_config(cfg, base_dir=tmp_path))
    cfg["metrics"] += [{"name": "ssim"}, {"name": "psnr", "label": "psnr_80", "max_db": 80.0}]
    plan = build_plan(load_config(cfg, base_dir=tmp_path))
    psnr, ssim, psnr_80 = plan.metrics
    for g in ("copy", "noisy"):
        assert psnr.samples[g] == alone.metrics[0].samples[g]
        assert ssim.samples[g] is psnr.samples[g] and psnr_80.samples[g] is psnr.samples[g]
    # another reference folder for one generator: its own samples, never another's
    other = tmp_path / "refs2"
    other.mkdir()
    for f in (tmp_path / "refs").iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    cfg["generators"][0]["references"] = "refs2"
    plan = build_plan(load_config(cfg, base_dir=tmp_path))
    g0, g1 = (g["name"] for g in cfg["generators"])
    assert plan.metrics[1].samples[g0] is plan.metrics[0].samples[g0]
    assert all(s.reference.parent.name == "refs2" for s in plan.metrics[1].samples[g0])
    assert all(s.reference.parent.name == "refs" for s in plan.metrics[1].samples[g1])
