"""``genmetrics weights list|download|verify`` and the weights error's wording.

Nothing downloads: ``download`` and ``verify`` run against a fake hub, the two hub functions the command
reaches (``huggingface_hub.snapshot_download`` and open_clip's ``hf_hub_download``) replaced by functions that
lay files out exactly as the Hugging Face cache does (``models--ORG--NAME/blobs/<hash>``,
``snapshots/<rev>/<file>`` links; an LFS blob is named by its sha256, which is what ``download`` checks).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import huggingface_hub
import open_clip.pretrained as ocp
import pytest
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import filter_repo_objects

from genmetrics.backbones import hub as hub_module
from genmetrics.backbones.hf import hf_cache_dir, unavailable_error
from genmetrics.backbones.weights import genmetrics_home, weights_unavailable
from genmetrics.cli.main import main
from genmetrics.core.registry import alias_of, get_card, list_metrics

CLIP = "ViT-B-32-quickgelu/openai"
CLIP_REPO = ocp.get_pretrained_cfg("ViT-B-32-quickgelu", "openai")["hf_hub"].rstrip("/")
REV = "0123456789abcdef0123456789abcdef01234567"

#: the fake hub: repo -> {file: bytes}
HUB = {
    "facebook/dinov2-base": {
        "config.json": b'{"model_type": "dinov2"}\n',
        "preprocessor_config.json": b'{"crop_size": 224}\n',
        "model.safetensors": bytes(range(256)) * 40,
        "pytorch_model.bin": b"legacy pickle: never fetched",
        "tf_model.h5": b"tensorflow copy: never fetched",
    },
    CLIP_REPO: {
        "open_clip_model.safetensors": bytes(range(255, -1, -1)) * 30,
        "open_clip_pytorch_model.bin": b"legacy pickle: never fetched",
        "open_clip_config.json": b"{}\n",
    },
}
LFS = (".safetensors", ".bin", ".h5")


def _lay_out(repo: str, filename: str, cache_dir: str, data: bytes | None = None) -> Path:
    """Put one hub file where huggingface_hub puts it; returns the snapshot path (a link to the blob)."""
    content = HUB[repo][filename] if data is None else data
    folder = Path(cache_dir) / repo_folder_name(repo_id=repo, repo_type="model")
    name = (
        hashlib.sha256(content).hexdigest() if filename.endswith(LFS) else hashlib.sha1(content).hexdigest()
    )
    if data is not None:  # a corrupt transfer: the blob is named by the hub's hash, its bytes differ
        name = hashlib.sha256(HUB[repo][filename]).hexdigest()
    blob = folder / "blobs" / name
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    snap = folder / "snapshots" / REV / filename
    snap.parent.mkdir(parents=True, exist_ok=True)
    if not snap.exists():
        snap.symlink_to(os.path.relpath(blob, snap.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(REV)
    return snap


class FakeHub:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.corrupt: str | None = None

    def snapshot_download(self, repo_id, *, cache_dir, allow_patterns=None, **kw):
        self.calls.append(("snapshot", repo_id, cache_dir))
        if repo_id not in HUB:
            raise huggingface_hub.errors.RepositoryNotFoundError(f"404 {repo_id}")
        for f in filter_repo_objects(list(HUB[repo_id]), allow_patterns=allow_patterns):
            _lay_out(repo_id, f, cache_dir, b"garbage" if f == self.corrupt else None)
        return str(Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model") / "snapshots" / REV)

    def hf_hub_download(self, repo_id, filename, *, revision=None, cache_dir=None, **kw):
        self.calls.append(("file", f"{repo_id}/{filename}", cache_dir))
        if filename not in HUB.get(repo_id, {}):
            raise huggingface_hub.errors.EntryNotFoundError(f"404 {repo_id}/{filename}")
        return str(_lay_out(repo_id, filename, cache_dir))


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    monkeypatch.setattr(ocp, "hf_hub_download", fake.hf_hub_download)
    monkeypatch.setattr(hub_module, "unreachable", lambda url=None: None)  # the fake hub answers
    for var in ("GENMETRICS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return fake


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------------------------- list


def test_list_names_every_model_metric_and_where_its_files_go(capsys):
    rc, out, _ = run(["weights", "list", "--json"], capsys)
    assert rc == 0
    listed = json.loads(out)
    home = genmetrics_home()
    assert listed["home"] == str(home)
    by_metric = {m: row for row in listed["weights"] for m in row["metrics"]}
    for name in list_metrics():
        if alias_of(name) is not None:
            continue
        card = get_card(name)
        if card.family == "mie":  # a trained-heads metric: its public part is the Qwen3.5 backbone
            from genmetrics.mie.common import BACKBONES, DEFAULT_BACKBONE

            assert by_metric[name]["weights"] == BACKBONES[DEFAULT_BACKBONE]
        elif card.default_weights:
            assert by_metric[name]["weights"] == card.default_weights, name
        else:
            assert name in listed["no_weights"] and name not in by_metric, name
    assert {"psnr", "ssim"} <= set(listed["no_weights"])
    rows = {r["weights"]: r for r in listed["weights"]}
    assert len(rows) == len(listed["weights"])  # one row per weights, however many metrics share them
    # open_clip: the hub copy open_clip's own table names, in the open_clip cache the loader passes
    clip = rows[CLIP]
    assert clip["source"] == "open_clip-hub" and clip["from"] == CLIP_REPO
    assert clip["files"].startswith(ocp.HF_SAFE_WEIGHTS_NAME)
    assert Path(clip["dest"]) == home / "open_clip" / repo_folder_name(repo_id=CLIP_REPO, repo_type="model")
    assert {"clip_i", "clipscore", "sad", "pad", "rsad", "raclip", "hcs"} <= set(clip["metrics"])
    # transformers: DINO and the Qwen backbones, in the hf cache that load_vlm / DINO read
    for repo in ("facebook/dinov2-base", "Qwen/Qwen3-VL-Embedding-2B", "Qwen/Qwen3.5-4B"):
        assert rows[repo]["source"] == "hf" and rows[repo]["from"] == repo
        assert Path(rows[repo]["dest"]) == hf_cache_dir() / repo_folder_name(repo_id=repo, repo_type="model")
    assert not any(r["downloaded"] for r in rows.values())


def test_list_text_alias_and_weights_named_directly(capsys):
    rc, out, _ = run(["weights", "list", "clip_t", "Qwen/Qwen3.5-0.8B", "psnr"], capsys)
    assert rc == 0
    assert f"{CLIP}  (clip_t; not downloaded)" in out
    assert (
        f"to   {genmetrics_home() / 'open_clip' / repo_folder_name(repo_id=CLIP_REPO, repo_type='model')}"
        in out
    )
    assert "Qwen/Qwen3.5-0.8B  (not downloaded)" in out
    assert "no weights needed: psnr" in out


def test_list_names_transformers_weights_the_hugging_face_cache_holds(capsys, monkeypatch, tmp_path):
    """dino loads facebook/dinov2-base from the Hugging Face cache when GENMETRICS_HOME has none; `weights list`
    said only 'not downloaded' (red before), as if dino could not run here. open_clip weights, which the
    loader never reads from there, get no such line."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    folder = Path(_lay_out("facebook/dinov2-base", "config.json", str(tmp_path / "hf-cache"))).parents[2]
    _lay_out(CLIP_REPO, ocp.HF_SAFE_WEIGHTS_NAME, str(tmp_path / "hf-cache"))
    rc, out, _ = run(["weights", "list", "dino", "clip_i", "--json"], capsys)
    rows = {r["weights"]: r for r in json.loads(out)["weights"]}
    assert (
        rc == 0 and rows["facebook/dinov2-base"]["hf_cache"] == str(folder) and rows[CLIP]["hf_cache"] is None
    )
    rc, out, _ = run(["weights", "list", "dino"], capsys)
    assert f"(dino; not downloaded; in the Hugging Face cache {folder}, loaded from there)" in out
    rc, out, _ = run(["weights", "list", "facebook/dinov2-large"], capsys)
    assert "facebook/dinov2-large  (not downloaded)" in out


def test_list_unknown_metric_is_one_error_line(capsys):
    rc, out, err = run(["weights", "list", "clipp_t"], capsys)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and "clipp_t" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------ download


def test_download_fills_the_loaders_caches_and_records_sha256(hub, capsys):
    rc, out, err = run(["weights", "download", "dino", "clip_t"], capsys)
    assert rc == 0, err
    home = genmetrics_home()
    # each through its library's own cache folder
    assert ("snapshot", "facebook/dinov2-base", str(home / "hf")) in hub.calls
    assert hub.calls[-1] == ("file", f"{CLIP_REPO}/{ocp.HF_SAFE_WEIGHTS_NAME}", str(home / "open_clip"))
    # the loaders find them there: transformers' cache lookup, and open_clip's own download (cache hit)
    assert huggingface_hub.try_to_load_from_cache(
        "facebook/dinov2-base", "config.json", cache_dir=hf_cache_dir()
    )
    manifest = json.loads((home / "weights.json").read_text())["weights"]
    dino = {Path(f["path"]).name: f for f in manifest["facebook/dinov2-base"]["files"]}
    assert set(dino) == {"config.json", "preprocessor_config.json", "model.safetensors"}  # no pickles, no TF
    for name, f in dino.items():  # an independent hash of what the hub served
        assert f["sha256"] == hashlib.sha256(HUB["facebook/dinov2-base"][name]).hexdigest()
        assert f["size"] == len(HUB["facebook/dinov2-base"][name])
        assert (home / f["path"]).read_bytes() == HUB["facebook/dinov2-base"][name]
    assert dino["model.safetensors"]["hub_sha256"] == dino["model.safetensors"]["sha256"]
    (clip,) = manifest[CLIP]["files"]
    assert clip["sha256"] == hashlib.sha256(HUB[CLIP_REPO][ocp.HF_SAFE_WEIGHTS_NAME]).hexdigest()
    assert manifest[CLIP]["metrics"] == ["clip_t"]
    # what to copy: the two folders and the manifest, relative to GENMETRICS_HOME
    assert "copy to the same places under GENMETRICS_HOME" in out
    for rel in (
        "hf/models--facebook--dinov2-base",
        f"open_clip/{repo_folder_name(repo_id=CLIP_REPO, repo_type='model')}",
    ):
        assert f"  {rel}\n" in out and (home / rel).is_dir()
    assert "  weights.json\n" in out
    rc, out, _ = run(["weights", "list", "dino"], capsys)
    assert "(dino; downloaded)" in out


def test_download_refuses_a_blob_whose_bytes_differ_from_the_hub_sha256(hub, capsys):
    hub.corrupt = "model.safetensors"
    rc, _, err = run(["weights", "download", "dino"], capsys)
    assert rc == 1 and "corrupt" in err and "genmetrics weights download" in err
    assert not (genmetrics_home() / "weights.json").exists()  # nothing recorded for a bad download


def test_download_of_an_empty_listing_is_one_line_and_records_nothing(hub, monkeypatch, capsys):
    monkeypatch.setitem(HUB, "facebook/dinov2-base", {})  # the hub lists no files for the repo
    rc, _, err = run(["weights", "download", "dino"], capsys)
    assert rc == 1 and "listed no files" in err and "facebook/dinov2-base" in err
    assert len(err.strip().splitlines()) == 1
    assert not (genmetrics_home() / "weights.json").exists()  # nothing recorded for an empty download


def test_download_into_a_pipe_shows_no_progress_bars_and_restores_them(hub, monkeypatch, capsys):
    from huggingface_hub import utils as hf_utils

    seen = []
    real = hub.snapshot_download

    def watching(*a, **kw):
        seen.append(hf_utils.are_progress_bars_disabled())
        return real(*a, **kw)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", watching)
    assert not hf_utils.are_progress_bars_disabled()
    assert run(["weights", "download", "dino"], capsys)[0] == 0  # stderr captured: not a terminal
    assert seen == [True] and not hf_utils.are_progress_bars_disabled()


def test_download_offline_is_refused_before_any_hub_call(hub, monkeypatch, capsys):
    monkeypatch.setenv("GENMETRICS_OFFLINE", "1")
    rc, _, err = run(["weights", "download", "dino"], capsys)
    assert rc == 1 and "downloads are disabled" in err and "genmetrics weights download" in err
    assert hub.calls == []


def test_download_offline_with_everything_here_says_so_and_exits_0(hub, monkeypatch, capsys, tmp_path):
    """Offline, weights already recorded in GENMETRICS_HOME or (transformers) in the Hugging Face cache need no
    download: the command said 'downloads are disabled' and exited 1 (red before); weights missing still do."""
    assert run(["weights", "download", "clip_i"], capsys)[0] == 0
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    hub.calls.clear()
    monkeypatch.setenv("GENMETRICS_OFFLINE", "1")
    bare = tmp_path / "hf-cache" / "models--facebook--dinov2-base" / "snapshots" / "abc"
    bare.mkdir(
        parents=True
    )  # a snapshot without config.json (an interrupted copy): the loader finds no model
    rc, out, err = run(["weights", "download", "dino"], capsys)
    assert rc == 1 and "facebook/dinov2-base is not here" in err, out  # it said 'already here' (red before)
    bare.rmdir()
    folder = Path(_lay_out("facebook/dinov2-base", "config.json", str(tmp_path / "hf-cache"))).parents[2]
    rc, out, err = run(["weights", "download", "dino", "clip_i"], capsys)
    assert rc == 0, err
    assert f"facebook/dinov2-base: already here ({folder}); nothing to download" in out
    assert f"{CLIP}: already here (" in out and hub.calls == []
    rc, _, err = run(["weights", "download", "dino", "tpips"], capsys)
    assert rc == 1 and "and Qwen/Qwen3-VL-Embedding-2B is not here" in err and hub.calls == []
    # verify agrees with download: weights the loader reads from the Hugging Face cache are not MISSING
    rc, out, err = run(["weights", "verify", "dino"], capsys)
    assert rc == 0 and f"ok       facebook/dinov2-base in the Hugging Face cache {folder}" in out, out + err


# -------------------------------------------------------------------------------------------- verify


def test_verify_ok_then_flipped_byte_then_missing_file(hub, capsys):
    assert run(["weights", "download", "dino", "clip_i"], capsys)[0] == 0
    rc, out, err = run(["weights", "verify", "dino", "clip_i"], capsys)
    assert rc == 0, err
    assert out.count("ok       ") == 4 and "CORRUPT" not in out and "MISSING" not in out
    home = genmetrics_home()
    manifest = json.loads((home / "weights.json").read_text())["weights"]
    weights = next(
        home / f["path"]
        for f in manifest["facebook/dinov2-base"]["files"]
        if f["path"].endswith(".safetensors")
    )
    blob = weights.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    blob.write_bytes(bytes(data))
    rc, out, err = run(["weights", "verify", "dino", "clip_i"], capsys)
    assert rc == 1
    assert f"CORRUPT  {weights}" in out and out.count("ok       ") == 3
    assert "sha256 differs" in err and "genmetrics weights download dino clip_i" in err
    clip = home / manifest[CLIP]["files"][0]["path"]
    clip.unlink()
    rc, out, err = run(["weights", "verify", "clip_i"], capsys)
    assert rc == 1 and f"MISSING  {clip}" in out and "missing" in err


def test_verify_before_download_names_the_command(capsys):
    rc, out, err = run(["weights", "verify", "tpips"], capsys)
    assert rc == 1
    assert "MISSING  Qwen/Qwen3-VL-Embedding-2B" in out
    assert "not downloaded" in err and "`genmetrics weights download tpips`" in err


# ---------------------------------------------------------------------------------- the weights error


LONG = "Cannot reach https://huggingface.co/api/models/facebook/dinov2-base: " + "connection refused " * 30


@pytest.mark.parametrize("make", ["weights_unavailable", "unavailable_error"])
def test_weights_error_keeps_whole_words_and_names_the_command(make):
    cause = OSError(LONG + "\nsecond line")
    if make == "weights_unavailable":
        err = weights_unavailable("facebook/dinov2-base", ["/x/hf"], "weights=/local/dir", cause)
    else:
        err = unavailable_error("facebook/dinov2-base", ["/x/hf"], cause=cause)
    msg = str(err)
    why = msg[msg.index("(OSError: ") + len("(OSError: ") : msg.index("). Looked in")]
    assert why.endswith(" ...") and "second line" not in msg
    kept = why[: -len(" ...")].split(" ")
    assert kept == LONG.split(" ")[: len(kept)]  # a prefix of whole words, the last one included
    assert "genmetrics weights download facebook/dinov2-base" in msg


def test_weights_error_with_an_empty_cause_and_a_local_path():
    msg = str(
        weights_unavailable("/data/ckpt.safetensors", "/data/ckpt.safetensors", "weights=PATH", OSError())
    )
    assert "(OSError)" in msg and "genmetrics weights download" not in msg  # a path cannot be downloaded
