"""The input pipeline: one decode per file per run (PIL instrumented, worker processes included), results
identical for any number of workers and batch size, order kept, bad files named, no worker left behind, a
worker that dies reported as a dead worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import genmetrics as gm
from genmetrics.cli.main import cli, main
from genmetrics.data.io.images import load_image, pil_to_tensor
from genmetrics.data.io.pipeline import decoded, decoded_chunks, rgb_uint8
from genmetrics.errors import InputError, WorkerDiedError
from genmetrics.leaderboard import run_leaderboard
from genmetrics.testing import random_images
from genmetrics.testing.pil_counts import count_pil
from tests.cli import test_one_wiring as wiring


def _folders(root: Path, n: int = 6, size: int = 24) -> list[Path]:
    """refs/ (PNG) and a/ b/ c/ (PNG and JPEG, alternating), ``n`` images each, matched by stem."""
    files = []
    for k, folder in enumerate(("refs", "a", "b", "c")):
        (root / folder).mkdir(parents=True)
        for i, x in enumerate(random_images(n, size, seed=k)):
            ext = "jpg" if folder != "refs" and i % 2 else "png"
            p = root / folder / f"{i:03d}.{ext}"
            Image.fromarray(x.permute(1, 2, 0).numpy()).save(p)
            files.append(p)
    return files


def _config(metrics=("psnr", "ssim", "ms_ssim")) -> dict:
    return {
        "data": {"references": "refs"},
        "run": {"n_boot": 10},
        "generators": [{"name": g, "images": g} for g in "abc"],
        "metrics": [{"name": m} for m in metrics],
    }


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("workers", [0, 2])
def test_leaderboard_decodes_each_file_once(tmp_path, workers):
    files = _folders(tmp_path, size=176)  # ms_ssim needs > 160 px
    with count_pil() as c:
        run_leaderboard(_config(), tmp_path / "out", base_dir=tmp_path, plots=False, workers=workers)
    o_lo, o_hi, d_lo, d_hi = c.per_file(files)
    assert (d_lo, d_hi) == (1, 1), "every file (references included) decoded exactly once"
    assert o_hi <= 2
    assert len(_rows(tmp_path / "out")) == 3 * 3 * 6


def test_score_cli_decodes_each_file_once(tmp_path):
    files = _folders(tmp_path)
    with count_pil() as c:
        res = CliRunner().invoke(
            cli,
            [
                "score",
                "psnr",
                "-r",
                str(tmp_path / "refs"),
                "-c",
                str(tmp_path / "a"),
                "--json",
                "--workers",
                "2",
            ],
        )
    assert res.exit_code == 0, res.output
    used = [f for f in files if f.parent.name in ("refs", "a")]
    o_lo, o_hi, d_lo, d_hi = c.per_file(used)
    assert (d_lo, d_hi) == (1, 1) and o_hi <= 2


def test_a_shared_reference_is_decoded_once_across_chunks(tmp_path):
    _folders(tmp_path)
    ref = tmp_path / "refs" / "000.png"
    with count_pil() as c:
        res = CliRunner().invoke(
            cli,
            [
                "score",
                "psnr",
                "-r",
                str(ref),
                "-c",
                str(tmp_path / "refs"),
                "--batch-size",
                "2",
                "--workers",
                "0",
            ],
        )
    assert res.exit_code == 0, res.output
    assert c.decodes[os.path.realpath(ref)] == 1  # one file for every candidate, over three chunks


@pytest.mark.parametrize("workers,batch", [(0, 1), (1, 5), (2, 32), (4, 3)])
def test_results_identical_for_any_workers_and_batch(tmp_path, workers, batch):
    """Bitwise: every row of the run equals the run with the file-reading path (workers=0, batch 2)."""
    _folders(tmp_path / "d", size=176)
    cfg = _config()
    ref = run_leaderboard(
        cfg, tmp_path / "ref", base_dir=tmp_path / "d", plots=False, workers=0, batch_size=2
    )
    got = run_leaderboard(
        cfg, tmp_path / "got", base_dir=tmp_path / "d", plots=False, workers=workers, batch_size=batch
    )
    assert _rows(ref.out) == _rows(got.out)
    # and each score equals the metric fed the file paths directly (the second computation)
    import genmetrics as gm

    m = gm.create_metric("ssim")
    a = sorted((tmp_path / "d" / "a").iterdir())
    r = [tmp_path / "d" / "refs" / f"{p.stem}.png" for p in a]
    m.update(reference=[str(x) for x in r], candidates=[str(x) for x in a], ids=[p.stem for p in a])
    direct = dict(zip(m.per_sample()["ids"], m.per_sample()["scores"].double().tolist()))
    rows = {r["id"]: r["score"] for r in _rows(got.out) if r["generator"] == "a" and r["metric"] == "ssim"}
    assert rows == direct


def test_decoded_keeps_order_names_bad_files_and_matches_load_image(tmp_path):
    files = _folders(tmp_path)[:8]
    bad = tmp_path / "refs" / "bad.png"
    bad.write_bytes(b"not an image")
    paths = files[:3] + [bad] + files[3:]
    out = [item for batch in decoded(paths, batch_size=3, workers=2) for item in batch]
    assert [p for p, _ in out] == paths
    assert isinstance(out[3][1], InputError) and "bad.png" in str(out[3][1])
    for p, o in out[:3] + out[4:]:
        assert torch.equal(o[0].float() / 255, pil_to_tensor(load_image(p)))
    assert torch.equal(
        rgb_uint8(Image.open(files[0]), "x").float() / 255, pil_to_tensor(load_image(files[0]))
    )


def test_a_single_batch_is_decoded_without_worker_processes(tmp_path, monkeypatch):
    """One batch leaves nothing to overlap: it is decoded in the calling process (a worker's start-up was most
    of `score psnr`'s own CPU time on a few pairs); two batches still go to the workers."""
    files = _folders(tmp_path)[:4]
    want = [item for batch in decoded(files, batch_size=4, workers=0) for item in batch]
    loaders: list[int] = []
    real = torch.utils.data.DataLoader

    def spy(*a, **k):
        loaders.append(k["num_workers"])
        return real(*a, **k)

    monkeypatch.setattr(torch.utils.data, "DataLoader", spy)
    got = [item for batch in decoded(files, batch_size=4, workers=2) for item in batch]
    assert loaders == []
    assert [p for p, _ in got] == [p for p, _ in want]
    assert all(torch.equal(a[0], b[0]) for (_, a), (_, b) in zip(got, want))
    assert len([b for b in decoded(files, batch_size=2, workers=2)]) == 2 and loaders == [2]


def test_decoded_chunks_serve_every_chunk_its_files(tmp_path):
    files = _folders(tmp_path)[:6]
    chunks = [files[0:3], files[2:5], [files[0], files[5]]]
    caches = list(decoded_chunks(chunks, batch_size=2, workers=2))
    for chunk, cache in zip(chunks, caches):
        assert sorted(cache.items) == sorted(str(f) for f in chunk)
        for f in chunk:
            assert torch.equal(cache.get(f), rgb_uint8(load_image(f), str(f)))


def test_bad_file_in_leaderboard_named_and_skipped(tmp_path):
    _folders(tmp_path, size=24)
    (tmp_path / "b" / "002.png").write_bytes(b"broken")  # replaces nothing: 002 is a .png in b
    with pytest.raises(InputError, match="002.png"):
        run_leaderboard(_config(("psnr",)), tmp_path / "o1", base_dir=tmp_path, plots=False, workers=2)
    res = run_leaderboard(
        _config(("psnr",)), tmp_path / "o2", base_dir=tmp_path, plots=False, workers=2, on_error="skip"
    )
    skipped = [json.loads(x) for x in (res.out / "skipped.jsonl").read_text().splitlines()]
    assert [(r["generator"], r["id"]) for r in skipped] == [("b", "002")]
    assert len(_rows(res.out)) == 3 * 6 - 1


# A test run started as a background job (``cmd &`` in a script, nohup) inherits SIGINT ignored, and so would
# the scripts the Ctrl-C tests start: each restores Python's KeyboardInterrupt handler, as a terminal has it.


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


@pytest.mark.parametrize("how", ["sigint", "worker_error"])
def test_no_worker_left_behind(tmp_path, how):
    """Ctrl-C in the middle of a stream, or a worker that dies: the process exits and no child remains."""
    _folders(tmp_path, n=4)
    script = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        from genmetrics.data.io.pipeline import decoded
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
        files = sorted(Path({str(tmp_path / "refs")!r}).iterdir()) * 200
        def slow(im, name):
            if {how!r} == "worker_error":
                os._exit(3)  # a worker killed hard (segfault, OOM killer)
            time.sleep(0.05)
            return 0
        print("ready", flush=True)
        for batch in decoded(files, [slow], batch_size=2, workers=2):
            pass
        """
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    if how == "sigint":
        deadline = time.time() + 30
        while len(_children(proc.pid)) < 2 and time.time() < deadline:
            time.sleep(0.1)
        assert len(_children(proc.pid)) >= 2, "the workers started"
        proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=60)
    assert rc != 0
    time.sleep(0.5)
    assert _children(proc.pid) == []
    out = subprocess.run(["pgrep", "-f", str(tmp_path / "refs")], capture_output=True, text=True).stdout
    assert out.split() == [], "no process still reads the files"


def test_ctrl_c_while_workers_start_is_an_interrupt_not_a_dead_worker(tmp_path):
    """Ctrl-C to the process group in the window between a worker's fork and its ignoring SIGINT (the worker's
    start-up, widened here to 1.5 s): the worker holds the signal until it ignores it, so the main process
    alone is interrupted (KeyboardInterrupt), no worker is reported dead, and none is left behind."""
    _folders(tmp_path, n=4)
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        from pathlib import Path
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
        import torch.utils.data._utils.worker as W
        import genmetrics.data.io.pipeline as P
        loop = W._worker_loop  # what a forked worker runs first: its start-up, before any handler is set
        def late_loop(*args, **kwargs):
            time.sleep(1.5)
            return loop(*args, **kwargs)
        W._worker_loop = late_loop
        files = sorted(Path({str(tmp_path / "refs")!r}).iterdir()) * 50
        print("ready", flush=True)
        try:
            for batch in P.decoded(files, batch_size=2, workers=2):
                pass
            print("END")
        except KeyboardInterrupt:
            print("INTERRUPTED")
        except BaseException as e:
            print("OTHER", type(e).__name__, e)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    deadline = time.time() + 30
    while len(_children(proc.pid)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(_children(proc.pid)) >= 2, "the workers started"
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group, workers still in their start-up
    out, err = proc.communicate(timeout=60)
    assert out.decode().strip() == "INTERRUPTED", (out, err[-2000:])
    assert b"Traceback" not in err, err[-2000:]
    time.sleep(0.5)
    assert _children(proc.pid) == []


@pytest.mark.parametrize("workers", ["0", "2"])
def test_compare_decodes_each_file_once_and_is_worker_independent(tmp_path, monkeypatch, workers):
    monkeypatch.setenv("GENMETRICS_BACKBONE_PROVIDER", "genmetrics.testing:tiny_backbones")
    files = _folders(tmp_path, n=5)
    args = ["compare", "--real", str(tmp_path / "refs"), "--generated", str(tmp_path / "a")]
    args += ["--attributes", "smiling,wearing hat", "--n-boot", "10", "--batch-size", "2", "--json"]
    with count_pil() as c:
        res = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "out"), "--workers", workers])
    assert res.exit_code == 0, res.output
    used = [f for f in files if f.parent.name in ("refs", "a")]
    o_lo, o_hi, d_lo, d_hi = c.per_file(used)
    assert (d_lo, d_hi) == (1, 1) and o_hi <= 2
    # the same numbers as the in-process decoding (workers 0) of a second run
    ref = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "ref"), "--workers", "0"])
    s1, s2 = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("out", "ref"))
    assert s1["sad"] == s2["sad"] and s1["pad"] == s2["pad"], ref.output


#: the wiring test's data set (a module fixture): images, real set, prompts, subject lists and MIE heads
data = wiring.data


#: float32 rounding of one model forward: a dot product of length n is within n * eps (relative, worst case);
#: n = 1024 bounds the longest reduction of the tiny backbones (their widths and MLPs are <= 256)
BATCH_TOL = 1024 * torch.finfo(torch.float32).eps


@pytest.mark.slow
@pytest.mark.parametrize("name", wiring.METRICS)
def test_every_metric_bitwise_equal_for_any_workers_and_batch(name, data, tmp_path):
    """Every registered metric that reads images (tiny backbones), through the leaderboard: the rows of
    workers 0 / 1 / 2 / 4 are the same bytes (order kept). Across batch sizes 1 / 2 / 3 / 32 pixel metrics
    are the same bytes too; a model's matrix products of another shape may round differently (BLAS blocks
    by shape), so there the scores agree within float32 rounding and the ids and order are the same."""
    from genmetrics.backbones.provider import use_provider
    from genmetrics.testing import tiny_backbones

    _, entry = wiring._setup(name, data)
    cfg = wiring._config(data, entry)

    def run(workers: int, batch: int) -> bytes:
        out = tmp_path / f"w{workers}b{batch}"
        with use_provider(tiny_backbones):
            run_leaderboard(cfg, out, plots=False, workers=workers, batch_size=batch)
        return (out / "results.jsonl").read_bytes()

    same_batch = [run(w, 2) for w in (0, 1, 2, 4)]
    assert same_batch[0] and all(r == same_batch[0] for r in same_batch[1:])
    base = [json.loads(x) for x in same_batch[0].splitlines()]
    card = gm.registry.get_card(name)
    model = gm.metric_info(name)["default_weights"] is not None or "heads" in gm.registry.metric_options(name)
    assert model or card.name in ("psnr", "ssim", "ms_ssim"), "a new metric: say whether it runs a model"
    for batch in (1, 3, 32):
        other = run(4 if batch == 32 else 0, batch)
        if not model:
            assert other == same_batch[0]
            continue
        rows = [json.loads(x) for x in other.splitlines()]
        assert [(r["generator"], r["metric"], r["id"]) for r in rows] == [
            (r["generator"], r["metric"], r["id"]) for r in base
        ]
        for a, b in zip(base, rows):
            if a["score"] is None:
                assert b["score"] is None
                continue
            assert abs(a["score"] - b["score"]) <= BATCH_TOL * max(1.0, abs(a["score"])), (a, b)


# ------------------------------------------------------------------------------------ a worker that dies
# A decoding worker that dies while handing a batch over is reported as a dead worker (exit 1, "worker"),
# never as a Ctrl-C (exit 130) or an end of input: the hand-over fetches shared-memory file descriptors from
# the worker, so a worker killed at that moment surfaces as ``EOFError`` or a refused connection.
class _LoaderThatLosesAWorker:
    """A DataLoader stand-in: hands over the first batch, then fails the way a killed worker's transfer does."""

    def __init__(self, dataset, batch_sampler, error, **_):
        self.dataset, self.batches, self.error = dataset, list(batch_sampler), error

    def __iter__(self):
        yield [self.dataset[j] for j in self.batches[0]]
        raise self.error


def _images(root, n=4, size=16):
    root.mkdir()
    for i, x in enumerate(random_images(n, size)):
        Image.fromarray(x.permute(1, 2, 0).numpy()).save(root / f"{i:03d}.png")
    return sorted(root.iterdir())


ERRORS = [EOFError("received 0 items of ancdata"), ConnectionRefusedError(111, "Connection refused")]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_decoded_names_the_dead_worker(tmp_path, monkeypatch, error):
    files = _images(tmp_path / "imgs")
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, error),
    )
    got = []
    with pytest.raises(WorkerDiedError, match="worker") as info:
        for batch in decoded(files, batch_size=2, workers=2):
            got.append(batch)
    assert len(got) == 1, "the batch handed over before the worker died is still delivered"
    assert info.value.__cause__ is error and "--resume" in str(info.value)


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_leaderboard_cli_exits_1_naming_the_worker_not_130(tmp_path, monkeypatch, capsys, error):
    _images(tmp_path / "refs")
    _images(tmp_path / "gen")
    cfg = tmp_path / "lb.yaml"
    cfg.write_text(
        json.dumps(
            {
                "data": {"references": "refs"},
                "generators": [{"name": "g", "images": "gen"}],
                "metrics": [{"name": "psnr"}],
            }
        )
    )
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, error),
    )
    rc = main(
        ["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--workers", "2", "--batch-size", "2"]
    )
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "worker" in err and "interrupted" not in err


#: what torch raises for a worker killed while decoding: from the loader's wait, or from its SIGCHLD handler
#: wherever the main process is (then it reaches the CLI without passing through the loader)
TORCH_DEATH = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")


def test_torch_s_own_report_of_a_killed_worker_names_it_and_the_resume(tmp_path, monkeypatch, capsys):
    """A worker SIGKILLed while decoding (the common case) used to reach the user as torch's bare message,
    without saying that finished results were kept or how to continue."""
    files = _images(tmp_path / "imgs")
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, TORCH_DEATH),
    )
    with pytest.raises(
        WorkerDiedError,
        match=r"\(pid 4242\) is killed by signal: Killed.\); run the command again \(`leaderboard --resume`",
    ) as info:
        list(decoded(files, batch_size=2, workers=2))
    assert info.value.__cause__ is TORCH_DEATH
    other = RuntimeError("DataLoader timed out")  # not a death: raised as it came
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, other),
    )
    with pytest.raises(RuntimeError) as info2:
        list(decoded(files, batch_size=2, workers=2))
    assert info2.value is other

    def killed_anywhere(*a, **k):  # the signal handler's exception, raised outside the loader
        raise TORCH_DEATH

    monkeypatch.setattr("genmetrics.cli.main.check_environment", killed_anywhere)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(pid 4242)" in err and "leaderboard --resume" in err
