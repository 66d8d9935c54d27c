"""genmetrics.mie.checkpoint: ``--heads`` given a run folder, an unfinished run, a pickled heads file or a relative
backbone path."""

from __future__ import annotations

from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


# ============================================================ later additions (each in its class)
@case("h-mie-heads-run-folder", "silent", "--heads given the --out folder of train mie: its best/ is used")
def _(ctx):
    from genmetrics.mie.checkpoint import resolve_heads

    for sub in ("final", "best"):
        (ctx.inp / "run" / sub).mkdir(parents=True)
        (ctx.inp / "run" / sub / "mie_config.json").write_text("{}")
    ctx.freeze()
    assert resolve_heads(ctx.inp / "run") == ctx.inp / "run" / "best"


@case("h-mie-heads-unfinished-run", "silent", "--heads given an unfinished run folder: says to --resume it")
def _(ctx):
    from genmetrics.mie.checkpoint import resolve_heads

    (ctx.inp / "run" / "checkpoints" / "step-4").mkdir(parents=True)
    ctx.freeze()
    ctx.refused(lambda: resolve_heads(ctx.inp / "run"), "--resume", "step-4")


@case("h-mie-heads-pickle-pt", "pickle", "an MIE heads .pt file that pickles code: refused, never run")
def _(ctx):
    from genmetrics.mie import checkpoint as mck

    p = ctx.payload(ctx.inp / "heads.pt")
    ctx.freeze()
    ctx.refused(lambda: mck._torch_load(p, "heads.safetensors"), str(p), "heads.safetensors")


@case("h-mie-relative-backbone", "silent", "a checkpoint naming ./models/vlm, loaded from another folder")
def _(ctx):
    from genmetrics.mie.checkpoint import backbone_location

    ck = ctx.inp / "ckpt"
    (ck / "models" / "vlm").mkdir(parents=True)
    ctx.freeze()
    ctx.monkeypatch.chdir(ctx.outside_dir)
    assert backbone_location("./models/vlm", ck) == str(ck / "models" / "vlm")
    msg = ctx.refused(lambda: backbone_location("./models/missing", ck), "looked in")
    assert str(ctx.outside_dir) in msg and str(ck) in msg


test_hostile = HOSTILE.test()
