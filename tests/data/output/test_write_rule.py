"""The write rule: every file genmetrics writes goes through ``genmetrics/data/output/``.

1. An AST scan of the whole package finds every call that writes a file (``open(..., "w"/"a"/"x"/"+")``,
   ``write_text``, ``write_bytes``, ``torch.save``, safetensors ``save_file``, ``savefig``, ``json.dump``,
   ``to_csv(path)``, ``faiss.write_index``, ``np.save``, numpy's ``open_memmap``, ``Image.save``,
   ``save_pretrained``, ``save_state``, ``os.replace`` / ``rename`` / ``shutil.move`` / ``copy``) and fails on
   one whose destination did not come from the rule: a name bound by ``with atomic_output(...) as name``,
   a path returned by ``destination()`` / ``make_folder()`` (directly, or a name assigned from one), or an
   in-memory buffer (``io.BytesIO``). ``data/output/`` itself is where the rule lives.
2. The rule's guarantees, with links planted in output folders: the file a link points to stays
   byte-identical, a folder that resolves outside the chosen one is refused, and nothing is left behind.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from genmetrics.data import results as R
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, _plant_link

PKG = Path(__file__).resolve().parents[2] / "genmetrics"
RULE = {"atomic_output", "destination", "make_folder"}
#: writers that hand a folder to code that fills it (peft / accelerate / genmetrics' own ``save_pretrained``,
#: a task's ``save``): their destination may also be a parameter of the enclosing function, whose callers
#: are checked at their own call sites (these calls are writers too)
DELEGATES = {"save_pretrained", "save_state", "save_peft", "save_checkpoint", "save"}
#: method / function name -> index of the destination argument (None: the receiver, ``path.write_text``)
WRITERS = {
    "write_text": None,
    "write_bytes": None,
    "save_file": 1,
    "savefig": 0,
    "write_index": 1,
    "open_memmap": 0,
    "save_pretrained": 0,
    "save_state": 0,
    "to_csv": 0,
    "save": 0,  # torch.save(obj, f) is handled below; Image.save(f) / np.save(f, a)
    "savez": 0,
    "save_peft": 1,
    "save_checkpoint": 1,
    "dump": 1,  # json.dump(obj, fp)
    "replace": 1,  # os.replace(src, dst); Path.replace(dst) below
    "rename": 1,
    "move": 1,
    "copy": 1,
    "copyfile": 1,
    "copy2": 1,
    "copytree": 1,
}


def _call_name(node: ast.Call) -> tuple[str, str | None]:
    f = node.func
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else None
        return f.attr, base
    if isinstance(f, ast.Name):
        return f.id, None
    return "", None


def _root_name(expr: ast.AST) -> str | None:
    """The variable a path expression is built from: ``tmp``, ``str(tmp)``, ``tmp / "x"``,
    ``os.path.join(tmp, ...)``."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.BinOp):
            expr = expr.left
        elif isinstance(expr, ast.Call) and expr.args and _call_name(expr)[0] in ("str", "join", "fspath"):
            expr = expr.args[0]
        else:
            return None


def _is_rule_call(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and _call_name(expr)[0] in RULE


class _Scope(ast.NodeVisitor):
    """Names a function binds from the rule (``with atomic_output(...) as x``, ``x = destination(...)``)
    or to an in-memory buffer; ``params`` the function's parameters."""

    def __init__(self, scope: ast.AST) -> None:
        self.safe: set[str] = set()
        self.params: set[str] = set()
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = scope.args
            self.params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            if _is_rule_call(item.context_expr) and isinstance(item.optional_vars, ast.Name):
                self.safe.add(item.optional_vars.id)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        v = node.value
        if _is_rule_call(v) or (isinstance(v, ast.Call) and _call_name(v)[0] == "BytesIO"):
            self.safe |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        self.generic_visit(node)


def _destination(node: ast.Call, name: str, base: str | None, safe: set[str]) -> ast.AST | None:
    """The destination expression of a writer call, or None when the call writes no file."""
    if name == "open" and base in (None, "io"):
        mode = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg == "mode"), None)
        )
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
            return node.args[0]
        return None
    if name == "open" and base == "os":  # os.open with write flags
        flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
        return (
            node.args[0] if any(f in flags for f in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND")) else None
        )
    if name not in WRITERS:
        return None
    if name == "save" and base == "torch":
        return node.args[1] if len(node.args) > 1 else None
    if name in ("replace", "rename") and base not in ("os", "shutil"):  # Path.replace(dst) / str.replace
        if (
            base == "dataclasses"
            or node.keywords
            or len(node.args) != 1
            or isinstance(node.args[0], ast.Constant)
        ):
            # str.replace(old, new) has two arguments; dataclasses.replace(obj, field=...) (imported bare or
            # not) builds an object and takes keywords, which Path.replace(target) never does
            return None
        return node.args[0]
    if name in ("move", "copy", "copyfile", "copy2", "copytree") and base != "shutil":
        return None
    if name == "dump" and base != "json":
        return None
    idx = WRITERS[name]
    if idx is None:
        return node.func.value if isinstance(node.func, ast.Attribute) else None
    if name == "to_csv" and (
        not isinstance(node.func, ast.Attribute)
        or (not node.args and not any(k.arg == "path_or_buf" for k in node.keywords))
    ):
        return None  # DataFrame.to_csv() returns the text; a function named to_csv is not pandas'
    if name in ("save", "save_peft", "save_checkpoint") and base != "torch":
        # Image.save(fp), np.save(file, a), task.save(module, path), save_peft(backbone, folder)
        if not node.args:
            return None  # an object's own save() (a cache) writes where the rule put it
        rooted = [a for a in node.args[:2] if _is_rule_call(a) or _root_name(a) in safe]
        return None if rooted else node.args[-1] if len(node.args) > 1 else node.args[0]
    args = node.args
    return args[idx] if len(args) > idx else None


def raw_writers(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every writer call whose destination does not come from the rule (judged in the
    innermost function that holds the call)."""
    tree = ast.parse(source)
    unsafe: dict[int, tuple[int, str]] = {}
    safe: set[int] = set()
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]
    for scope in scopes:  # outer scopes first: an inner function's verdict overrides
        names = _Scope(scope)
        names.visit(scope)
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call):
                continue
            name, base = _call_name(node)
            dest = _destination(node, name, base, names.safe)
            if dest is None:
                continue
            delegated = (
                name in DELEGATES
                and base not in ("torch", "np", "numpy")
                and (name != "save" or len(node.args) > 1)  # task.save(module, path), not Image.save(fp)
                and _root_name(dest) in names.params
            )
            if _is_rule_call(dest) or _root_name(dest) in names.safe or delegated:
                safe.add(id(node))
            else:
                unsafe[id(node)] = (node.lineno, ast.unparse(node)[:100])
    return sorted(v for k, v in unsafe.items() if k not in safe)


def _scan_package() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).as_posix()
        if rel.startswith("genmetrics/data/output/"):  # the rule itself
            continue
        bad = raw_writers(f.read_text(encoding="utf-8"))
        if bad:
            found[rel] = bad
    return found


def test_the_scan_finds_raw_writers_and_accepts_the_rule():
    """The scanner itself: every writer form is caught when raw, and passes when routed through the rule."""
    raw = """
import json, os, shutil, torch
def f(fig, img, obj, df, index):
    p = pick_a_path()
    open(p, "w").write("x"); open(p, mode="ab"); os.open(p, os.O_WRONLY | os.O_CREAT)
    p.write_text("x"); p.write_bytes(b"x"); torch.save(obj, p); save_file(obj, str(p))
    fig.savefig(p); img.save(p, format="PNG"); json.dump(obj, fh); df.to_csv(p); faiss.write_index(index, str(p))
    np.save(p, obj); np.lib.format.open_memmap(p, mode="w+"); obj.save_pretrained(p); acc.save_state(str(p))
    os.replace(t, p); p.rename(q); shutil.move(a, p)
"""
    assert len(raw_writers(raw)) == 19
    safe = """
import io, torch
def f(p, fig, img, obj, df):
    open(p).read(); open(p, "rb"); "a-b".replace("-", "_"); df.to_csv(index=False); hashes.save()
    with atomic_output(p, root=r) as tmp:
        fig.savefig(tmp); img.save(str(tmp)); obj.save_pretrained(tmp / "x")
    d = destination(p, root=r)
    torch.save(obj, d); os.replace(t, d); np.lib.format.open_memmap(destination(q), mode="w+")
    buf = io.BytesIO(); torch.save(obj, buf); replace(rec, aspect="overall")
"""
    assert raw_writers(safe) == []


def test_every_writer_in_the_package_goes_through_the_rule():
    found = _scan_package()
    assert not found, "writers that bypass genmetrics/data/output/:\n" + "\n".join(
        f"{f}:{ln}: {code}" for f, rows in found.items() for ln, code in rows
    )


# ------------------------------------------------------------------------------------------ the guarantees
@pytest.fixture
def planted(tmp_path):
    """An output folder with a link planted to a file outside it, and that file's bytes."""
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"do not touch\n")
    out = tmp_path / "out"
    out.mkdir()
    return out, outside, outside.read_bytes()


@pytest.mark.parametrize("name", ["results.jsonl", "summary.json", R.LOCK])
def test_a_link_is_never_written_through(planted, name):
    out, outside, before = planted
    (out / name).symlink_to(outside)
    writers = [
        lambda: R.atomic_write_text(out / name, "new", root=out),
        lambda: R.atomic_write_json(out / name, {"a": 1}, root=out),
        lambda: R.open_append(out / name, root=out),
        lambda: R.ResultsWriter(out / name, root=out),
        lambda: R.OutputLock(out),
    ]
    for write in writers[:-1] if name != R.LOCK else writers[-1:]:
        with pytest.raises(InputError, match="symbolic link"):
            write()
        assert outside.read_bytes() == before and (out / name).is_symlink()


def test_a_folder_that_resolves_outside_is_refused(planted, tmp_path):
    out, outside, before = planted
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "plots").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        R.atomic_write_bytes(out / "plots" / "a.png", b"png", root=out)
    with pytest.raises(InputError, match="symbolic link"):
        R.make_folder(out / "plots" / "sub", root=out)
    with pytest.raises(InputError, match="outside"):
        R.atomic_write_text(out / ".." / "escape.txt", "x", root=out)
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "escape.txt").exists()


def test_a_link_planted_after_the_check_is_replaced_not_followed(planted):
    """atomic_output renames its temporary file over the destination: a link that appears in between is
    replaced (the rename does not follow it) and its target is untouched."""
    out, outside, before = planted
    with R.atomic_output(out / "report.md", root=out) as tmp:
        tmp.write_bytes(b"report")
        (out / "report.md").symlink_to(outside)  # planted while the report is being written
    assert (out / "report.md").read_bytes() == b"report" and not (out / "report.md").is_symlink()
    assert outside.read_bytes() == before


def test_failed_writes_leave_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), R.atomic_output(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed while writing")
    assert target.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["summary.json"]
    folder = tmp_path / "adapter"
    with R.atomic_output(folder, directory=True) as d:
        (d / "a.bin").write_bytes(b"1")
    with pytest.raises(RuntimeError), R.atomic_output(folder, directory=True) as d:
        (d / "a.bin").write_bytes(b"2")
        raise RuntimeError("killed")
    assert (folder / "a.bin").read_bytes() == b"1" and sorted(os.listdir(tmp_path)) == [
        "adapter",
        "summary.json",
    ]


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-link-subfolder", "link", "plots/ is a link to a folder outside: a.png is never created there")
def _(ctx):
    from genmetrics.data.output.write_rule import destination

    ctx.out.mkdir()
    _plant_link(ctx.out / "plots", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: destination(ctx.out / "plots" / "a.png", root=ctx.out), "plots")
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-deep-subfolder", "link", "index/shards is a link: make_folder never creates through it")
def _(ctx):
    from genmetrics.data.output.write_rule import make_folder

    (ctx.out / "index").mkdir(parents=True)
    _plant_link(ctx.out / "index" / "shards", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: make_folder(ctx.out / "index" / "shards" / "x", root=ctx.out), "shards")


test_hostile = HOSTILE.test()
