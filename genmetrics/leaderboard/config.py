"""Leaderboard configuration: TOML (``tomllib``) or YAML (a safe loader refusing duplicate keys), validated with errors that
name the config file, the line and the key (``config.toml:12: generators[1].images: ...``).

Schema (every path is relative to the config file; see docs/leaderboard.md)::

    [data]                        # optional
    references = "refs"           # reference images, matched to generated images by file stem
    prompts = "prompts.jsonl"     # {"id": stem, "prompt": ..., "references": [...]} per line
    real = "real"                 # the real set of set-level metrics (default: references)
    recursive = false             # look for images in sub-folders too

    [run]                         # optional
    seed = 0                      # bootstrap and torch seed
    n_boot = 1000                 # bootstrap resamples
    ci = 0.95                     # confidence level
    batch_size = 32               # images per streamed chunk (default: the metric's batch_size)
    device = "auto"               # auto | cpu | cuda | cuda:1 ...
    rank_by = "psnr"              # metric column that orders the generators (default: the first with a direction)
    title = "Leaderboard"
    out = "runs/x"                # output folder if --out is not given
    cache = true                  # on-disk embedding cache for metrics with a cache_dir option:
                                  # true = GENMETRICS_HOME/features, false = off, or a folder

    [[generators]]                # one or more
    name = "model-a"
    images = "gen/model-a"
    references = "refs-a"         # optional: overrides data.references for this generator
    prompts = "prompts-a.jsonl"   # optional: overrides data.prompts

    [[metrics]]                   # one or more
    name = "psnr"                 # any registered metric
    label = "psnr"                # optional column name (default: name); lets one metric appear twice
    aspects = ["overall"]         # optional: condition texts scored one column each (tpips)
    max_db = 100.0                # any other key is an option of create_metric(name, ...); a string
                                  # option that is a path relative to the config ("./x" or an existing
                                  # file or folder) is resolved against the config's folder

Parsing needs neither torch nor the metric families' code; :func:`load_config` checks the structure, the
types and that every metric name is registered (a typo is named with its close matches before ``rank_by``
could suggest it back). Files, images and metric options are checked by
:func:`genmetrics.leaderboard.plan.build_plan`.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import yaml

from genmetrics.core.options import COUNT_MAX, SEED_MAX, expand_user
from genmetrics.core.registry import get_card
from genmetrics.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is a dependency there (pyproject.toml)
    import tomli as tomllib

TOP_KEYS = ("data", "run", "generators", "metrics")
DATA_KEYS = ("references", "prompts", "real", "recursive")
RUN_KEYS = ("seed", "n_boot", "ci", "batch_size", "device", "rank_by", "title", "out", "cache")
GENERATOR_KEYS = ("name", "images", "references", "prompts")
#: keys of a ``[[metrics]]`` table read by the runner; every other key is a metric option
RUNNER_METRIC_KEYS = ("name", "label", "aspects")

KeyPath = tuple[Any, ...]


def key_str(path: KeyPath) -> str:
    """``("generators", 1, "images")`` -> ``"generators[1].images"``.

    >>> key_str(("generators", 1, "images")), key_str(("run", "seed"))
    ('generators[1].images', 'run.seed')
    """
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "<top level>"


# ------------------------------------------------------------------------------------------ line lookup
_AOT = re.compile(r"^\s*\[\[\s*(?P<k>[^\[\]#]+?)\s*\]\]\s*(#.*)?$")
_TABLE = re.compile(r"^\s*\[\s*(?P<k>[^\[\]#]+?)\s*\]\s*(#.*)?$")
_BARE_OR_QUOTED = r"(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
_KEY = re.compile(rf"^\s*(?P<k>{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*)\s*=")


def _split_dotted(key: str) -> tuple[str, ...]:
    parts = re.findall(_BARE_OR_QUOTED, key)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def toml_lines(text: str) -> dict[KeyPath, int]:
    """Key path -> 1-based line of its definition, for the tables and keys of a TOML document
    (arrays of tables are indexed, as in the parsed document). Best effort: inline tables are not
    descended into; their keys report the line of the key that holds them.

    >>> lines = toml_lines('[run]\\nseed = 0\\n\\n[[generators]]\\nname = "a"\\nimages = "x"\\n')
    >>> lines[("run", "seed")], lines[("generators", 0, "images")]
    (2, 6)
    """
    lines: dict[KeyPath, int] = {}
    counts: dict[KeyPath, int] = {}
    current: KeyPath = ()
    in_multiline: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if in_multiline is not None:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        m = _AOT.match(line)
        if m:
            p = _with_indices(_split_dotted(m["k"]), counts)
            counts[p] = counts.get(p, -1) + 1
            current = (*p, counts[p])
            lines[current] = n
            lines.setdefault(p, n)
            continue
        m = _TABLE.match(line)
        if m:
            current = _with_indices(_split_dotted(m["k"]), counts)
            lines.setdefault(current, n)
            continue
        m = _KEY.match(line)
        if m:
            lines.setdefault((*current, *_split_dotted(m["k"])), n)
            rest = line[m.end() :]
            for q in ('"""', "'''"):
                if rest.count(q) % 2 == 1:
                    in_multiline = q
    return lines


def _with_indices(path: tuple[str, ...], counts: dict[KeyPath, int]) -> KeyPath:
    """Insert the current index after every array-of-tables prefix (``[generators.x]`` inside the
    second ``[[generators]]`` is ``generators[1].x``)."""
    out: list[Any] = []
    for part in path:
        out.append(part)
        if tuple(out) in counts and len(out) < len(path):
            out.append(counts[tuple(out)])
    return tuple(out)


def yaml_lines(text: str) -> dict[KeyPath, int]:
    """Key path -> 1-based line of its definition in a YAML document (as :func:`toml_lines`).

    >>> lines = yaml_lines("run:\\n  seed: 0\\ngenerators:\\n  - name: a\\n    images: x\\n")
    >>> lines[("run", "seed")], lines[("generators", 0, "images")]
    (2, 5)
    """
    lines: dict[KeyPath, int] = {}
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def walk(node: Any, path: KeyPath) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                kp = (*path, k.value)
                lines[kp] = k.start_mark.line + 1
                walk(v, kp)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return lines


# ------------------------------------------------------------------------------------------ specs
@dataclass
class DataSpec:
    """The config's ``[data]`` table: reference folder, prompts file, real set (absolute paths).

    >>> cfg = load_config({"data": {"references": "refs"}, "generators": [{"name": "blur", "images": "gen/blur"}],
    ...                    "metrics": [{"name": "ssim", "label": "ssim-7", "kernel_size": 7}], "run": {"seed": 3}})
    >>> cfg.data.references.is_absolute(), cfg.data.prompts
    (True, None)
    """

    references: Path | None = None
    prompts: Path | None = None
    real: Path | None = None
    recursive: bool = False


@dataclass
class RunSpec:
    """The config's ``[run]`` table (seed, bootstrap resamples, interval level, ranking column, ...).

    >>> cfg = load_config({"data": {"references": "refs"}, "generators": [{"name": "blur", "images": "gen/blur"}],
    ...                    "metrics": [{"name": "ssim", "label": "ssim-7", "kernel_size": 7}], "run": {"seed": 3}})
    >>> cfg.run.seed, cfg.run.n_boot, cfg.run.ci
    (3, 1000, 0.95)
    """

    seed: int = 0
    n_boot: int = 1000
    ci: float = 0.95
    batch_size: int | None = None
    device: str = "auto"
    rank_by: str | None = None
    title: str = "Leaderboard"
    out: Path | None = None
    cache: bool | Path = True


@dataclass
class GeneratorSpec:
    """One ``[[generators]]`` entry: its name, its image folder and its own references / prompts if any.

    >>> cfg = load_config({"data": {"references": "refs"}, "generators": [{"name": "blur", "images": "gen/blur"}],
    ...                    "metrics": [{"name": "ssim", "label": "ssim-7", "kernel_size": 7}], "run": {"seed": 3}})
    >>> g = cfg.generators[0]
    >>> g.name, g.images.name, g.index
    ('blur', 'blur', 0)
    """

    name: str
    images: Path
    references: Path | None
    prompts: Path | None
    index: int

    @property
    def key(self) -> KeyPath:
        """This generator's key path in the config, ``("generators", index)``, for error locations."""
        return ("generators", self.index)


@dataclass
class MetricSpec:
    """One ``[[metrics]]`` entry: the registered name, the column label and the options for ``create_metric``.

    >>> cfg = load_config({"data": {"references": "refs"}, "generators": [{"name": "blur", "images": "gen/blur"}],
    ...                    "metrics": [{"name": "ssim", "label": "ssim-7", "kernel_size": 7}], "run": {"seed": 3}})
    >>> m = cfg.metrics[0]
    >>> m.name, m.label, m.options
    ('ssim', 'ssim-7', {'kernel_size': 7})
    """

    name: str
    label: str
    options: dict[str, Any]
    aspects: list[str] | None
    index: int

    @property
    def key(self) -> KeyPath:
        """This metric's key path in the config, ``("metrics", index)``, for error locations."""
        return ("metrics", self.index)

    def columns(self) -> list[str]:
        """Result columns of this metric: the label, or ``label[aspect]`` per aspect."""
        if self.aspects:
            return [f"{self.label}[{a}]" for a in self.aspects]
        return [self.label]


@dataclass
class LeaderboardConfig:
    """A parsed config. ``error(key, msg)`` builds an :class:`InputError` naming the file, line and key.

    >>> cfg = load_config({"data": {"references": "refs"}, "generators": [{"name": "a", "images": "gen/a"}],
    ...                    "metrics": [{"name": "psnr"}, {"name": "ssim", "label": "ssim-7", "kernel_size": 7}]})
    >>> [m.label for m in cfg.metrics], cfg.metrics[1].options, cfg.generators[0].images.name
    (['psnr', 'ssim-7'], {'kernel_size': 7}, 'a')
    >>> str(cfg.error(("generators", 0, "images"), "no such folder"))
    'config: generators[0].images: no such folder'
    """

    path: Path | None
    base_dir: Path
    data: DataSpec
    run: RunSpec
    generators: list[GeneratorSpec]
    metrics: list[MetricSpec]
    raw: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The config file's path as text, or ``"config"`` for a config built in code."""
        return str(self.path) if self.path is not None else "config"

    def line(self, key: KeyPath) -> int | None:
        """The 1-based line of ``key`` in the TOML file (of its nearest enclosing key when it has none), or None
        when unknown."""
        key = tuple(key)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return None

    def where(self, key: KeyPath) -> str:
        """``"file:line: key"`` (``"file: key"`` without a line), the prefix of every error about ``key``."""
        line = self.line(key)
        return f"{self.source}:{line}: {key_str(key)}" if line else f"{self.source}: {key_str(key)}"

    def ref(self, key: KeyPath) -> str:
        """``data.references (line 3)``: a key mentioned inside another key's message."""
        line = self.line(key)
        return f"{key_str(key)} (line {line})" if line else key_str(key)

    def error(self, key: KeyPath, msg: str) -> InputError:
        """An :class:`~genmetrics.errors.InputError` saying ``msg`` about ``key``, located by :meth:`where`."""
        return InputError(f"{self.where(key)}: {msg}")

    def generator(self, name: str) -> GeneratorSpec:
        """The generator named ``name`` (raises StopIteration when there is none)."""
        return next(g for g in self.generators if g.name == name)


# ------------------------------------------------------------------------------------------ loading
def load_config(
    config: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None
) -> LeaderboardConfig:
    """Parse and check a config file (``.toml``, ``.yaml``/``.yml``) or an already-loaded mapping.

    For a mapping, relative paths resolve from ``base_dir`` (default: the current folder).

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     cfg = load_config(toy_leaderboard(d), base_dir=d)
    ...     [g.name for g in cfg.generators], cfg.data.references == Path(d).resolve() / "refs"
    (['noisy', 'copy'], True)
    >>> load_config({"generators": [{"name": "a"}], "metrics": [{"name": "psnr"}]})
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: config: generators[0].images: is required
    """
    if isinstance(config, Mapping):
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        return _from_dict(dict(config), path=None, base_dir=base.resolve(), lines={})
    path = Path(config)
    if not path.exists():
        raise InputError(f"config file {str(path)!r} does not exist; check the path")
    if path.is_dir():
        raise InputError(f"config {str(path)!r} is a folder; expected a .toml or .yaml file")
    if not path.is_file():
        raise InputError(
            f"config {str(path)!r} is not a regular file (a pipe or a device?); expected a .toml or .yaml file"
        )
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError(
            f"config {str(path)!r} is {path.stat().st_size:,} bytes; a config file is at most "
            f"{MAX_CONFIG_BYTES:,} (check the path)"
        )
    try:  # utf-8-sig: a byte-order mark (Windows editors) is accepted; CRLF line ends are valid TOML and YAML
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(
            f"config {str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8"
        ) from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        raw, lines = _parse_yaml(path, text)
    elif suffix == ".toml":
        raw, lines = _parse_toml(path, text)
    else:
        raise InputError(f"config {str(path)!r}: unknown extension {suffix!r}; use .toml, .yaml or .yml")
    return _from_dict(
        raw, path=path, base_dir=(Path(base_dir) if base_dir else path.parent).resolve(), lines=lines
    )


def _parse_toml(path: Path, text: str) -> tuple[dict[str, Any], dict[KeyPath, int]]:
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise InputError(
            f"{path}: the TOML is nested too deeply to read; a config is at most {MAX_CONFIG_DEPTH} levels deep"
        ) from None
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        where = f"{path}:{m[1]}" if m else str(path)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg) + (f" (column {m[2]})" if m else "")
        raise InputError(f"{where}: invalid TOML: {msg}") from None
    return raw, toml_lines(text)


#: the most values a YAML config may expand to, an alias counted at every use (a leaderboard of thousands of
#: generators stays far below; a "billion laughs" file of a few lines expands to 10**9), and its deepest nesting
MAX_YAML_NODES = 100_000
MAX_CONFIG_DEPTH = 64
#: the largest config file read (a config is a few kB; this bounds reading a wrong path such as an image folder
#: archive)
MAX_CONFIG_BYTES = 16 * 2**20


def yaml_size(root: Any) -> tuple[float, int]:
    """``(values, depth)`` of a composed YAML node graph as it expands, an alias counted at every use
    (``inf`` for a recursive alias); iterative and memoised, so it costs the size of the file, not of the
    expansion.

    >>> bomb = "a: &a [x, x, x]\\nb: &b [*a, *a, *a]\\nc: [*b, *b, *b]\\n"
    >>> yaml_size(yaml.compose(bomb, Loader=yaml.SafeLoader))
    (61, 5)
    >>> yaml_size(yaml.compose("a: &a [*a]", Loader=yaml.SafeLoader))[0]
    inf
    """
    if root is None:
        return 0, 0

    def children(node: Any) -> list[Any]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return list(node.value) if isinstance(node, yaml.SequenceNode) else []

    memo: dict[int, tuple[float, int]] = {}
    entered: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = [memo[id(k)] for k in children(node)]
            memo[key] = (1 + sum(k[0] for k in kids), 1 + max((k[1] for k in kids), default=0))
            continue
        if key in memo:
            continue
        if key in entered:  # entered and not finished: an ancestor of itself
            return math.inf, 0
        entered.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in children(node) if id(k) not in memo)
    return memo[id(root)]


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently);
    keys brought in by a merge (``<<: *base``) may still be overridden, as YAML allows."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given on line {seen[key]}); a key may appear once in a "
                    "mapping: keep one",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(path: Path, text: str) -> tuple[dict[str, Any], dict[KeyPath, int]]:
    try:
        size, depth = yaml_size(yaml.compose(text, Loader=yaml.SafeLoader))
        if size > MAX_YAML_NODES:
            grown = (
                "refers to itself (a recursive alias)"
                if math.isinf(size)
                else f"expands to {int(size):,} values"
            )
            raise InputError(
                f"{path}: the YAML {grown} through its aliases (&name / *name); a config may hold at most "
                f"{MAX_YAML_NODES:,}: write the values out, or use TOML"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise InputError(
                f"{path}: the YAML is nested {depth} levels deep; a config is at most {MAX_CONFIG_DEPTH} deep"
            )
        loader = _UniqueKeyLoader(text)  # a SafeLoader subclass: plain data only
        try:
            raw = loader.get_single_data()
        finally:
            loader.dispose()
    except RecursionError:
        raise InputError(
            f"{path}: the YAML is nested too deeply to read; a config is at most {MAX_CONFIG_DEPTH} levels deep"
        ) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InputError(f"{where}: invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise InputError(f"{path}: invalid YAML: {e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError(
            f"{path}:1: the config must be a mapping with data, generators and metrics; got {type(raw).__name__}"
        )
    return raw, yaml_lines(text)


def _close(word: str, options: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class _Checker:
    def __init__(self, cfg: LeaderboardConfig):
        self.cfg = cfg

    def table(self, value: Any, key: KeyPath, allowed: tuple[str, ...] | None) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.cfg.error(
                key, f"expected a table (mapping), got {type(value).__name__} {value!r}"[:300]
            )
        if allowed is not None:
            for k in value:
                if k not in allowed:
                    raise self.cfg.error(
                        (*key, k),
                        f"unknown key {k!r}{_close(str(k), allowed)} (allowed here: {', '.join(allowed)})",
                    )
        return dict(value)

    @overload
    def string(self, value: Any, key: KeyPath, *, required: Literal[True]) -> str: ...
    @overload
    def string(self, value: Any, key: KeyPath, *, required: bool = False) -> str | None: ...

    def string(self, value: Any, key: KeyPath, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.cfg.error(key, "is required")
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.cfg.error(
                key, f"expected a non-empty string, got {type(value).__name__} {value!r}"[:300]
            )
        return value

    @overload
    def path(self, value: Any, key: KeyPath, *, required: Literal[True]) -> Path: ...
    @overload
    def path(self, value: Any, key: KeyPath, *, required: bool = False) -> Path | None: ...

    def path(self, value: Any, key: KeyPath, *, required: bool = False) -> Path | None:
        s = self.string(value, key, required=required)
        if s is None:
            return None
        try:
            p = expand_user(s, what="path")
        except InputError as e:
            raise self.cfg.error(key, str(e)) from None
        return p if p.is_absolute() else self.cfg.base_dir / p

    def number(
        self,
        value: Any,
        key: KeyPath,
        typ: type,
        default: Any,
        *,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> Any:
        if value is None:
            return default
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if typ is int:
            ok = ok and float(value).is_integer()
        if ok:
            v = typ(value)
            ok = (lo is None or (v > lo if lo_open else v >= lo)) and (
                hi is None or (v < hi if hi_open else v <= hi)
            )
        if not ok:
            rng = ""
            if lo is not None or hi is not None:
                left = "(" if lo_open else "["
                right = ")" if hi_open else "]"
                rng = (
                    f" in {left}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}{right}"
                )
            raise self.cfg.error(
                key, f"expected {'an integer' if typ is int else 'a number'}{rng}, got {value!r}"
            )
        return typ(value)


def _from_dict(
    raw: dict[str, Any], *, path: Path | None, base_dir: Path, lines: dict[KeyPath, int]
) -> LeaderboardConfig:
    cfg = LeaderboardConfig(
        path=path,
        base_dir=base_dir,
        data=DataSpec(),
        run=RunSpec(),
        generators=[],
        metrics=[],
        raw=raw,
        lines=lines,
    )
    c = _Checker(cfg)
    c.table(raw, (), TOP_KEYS)

    d = c.table(raw.get("data"), ("data",), DATA_KEYS)
    recursive = d.get("recursive", False)
    if not isinstance(recursive, bool):
        raise cfg.error(("data", "recursive"), f"expected true or false, got {recursive!r}")
    cfg.data = DataSpec(
        references=c.path(d.get("references"), ("data", "references")),
        prompts=c.path(d.get("prompts"), ("data", "prompts")),
        real=c.path(d.get("real"), ("data", "real")),
        recursive=recursive,
    )

    r = c.table(raw.get("run"), ("run",), RUN_KEYS)
    cfg.run = RunSpec(
        seed=c.number(r.get("seed"), ("run", "seed"), int, 0, lo=0, hi=SEED_MAX),
        n_boot=c.number(r.get("n_boot"), ("run", "n_boot"), int, 1000, lo=1, hi=100_000),
        ci=c.number(r.get("ci"), ("run", "ci"), float, 0.95, lo=0.0, hi=1.0, lo_open=True, hi_open=True),
        batch_size=c.number(r.get("batch_size"), ("run", "batch_size"), int, None, lo=1, hi=COUNT_MAX),
        device=c.string(r.get("device"), ("run", "device")) or "auto",
        rank_by=c.string(r.get("rank_by"), ("run", "rank_by")),
        title=c.string(r.get("title"), ("run", "title")) or "Leaderboard",
        out=c.path(r.get("out"), ("run", "out")),
    )
    cache = r.get("cache", True)
    if isinstance(cache, str):
        cache = c.path(cache, ("run", "cache"))
    elif not isinstance(cache, bool):
        raise cfg.error(("run", "cache"), f"expected true, false or a folder, got {cache!r}")
    cfg.run.cache = cache

    gens = raw.get("generators")
    if gens is None:
        raise cfg.error(
            ("generators",), "is required: add one [[generators]] table per generator with name and images"
        )
    if not isinstance(gens, list) or not gens:
        raise cfg.error(("generators",), "expected a non-empty list of tables ([[generators]] in TOML)")
    seen: dict[str, int] = {}
    for i, g in enumerate(gens):
        key = ("generators", i)
        g = c.table(g, key, GENERATOR_KEYS)
        name = c.string(g.get("name"), (*key, "name"), required=True)
        if name.startswith("__"):
            raise cfg.error(
                (*key, "name"), f"generator names may not start with '__' (reserved), got {name!r}"
            )
        if name in seen:
            raise cfg.error(
                (*key, "name"), f"duplicate generator name {name!r} (also generators[{seen[name]}])"
            )
        seen[name] = i
        cfg.generators.append(
            GeneratorSpec(
                name=name,
                images=c.path(g.get("images"), (*key, "images"), required=True),
                references=c.path(g.get("references"), (*key, "references")),
                prompts=c.path(g.get("prompts"), (*key, "prompts")),
                index=i,
            )
        )

    mets = raw.get("metrics")
    if mets is None:
        raise cfg.error(("metrics",), "is required: add one [[metrics]] table per metric with its name")
    if not isinstance(mets, list) or not mets:
        raise cfg.error(("metrics",), "expected a non-empty list of tables ([[metrics]] in TOML)")
    columns: dict[str, int] = {}
    for i, m in enumerate(mets):
        key = ("metrics", i)
        m = c.table(m, key, None)
        name = c.string(m.get("name"), (*key, "name"), required=True)
        try:  # an unknown metric (a typo: "ssmi") is named with its close matches, before anything else
            get_card(name)
        except ValueError as e:
            raise cfg.error((*key, "name"), str(e)) from None
        label = c.string(m.get("label"), (*key, "label")) or name
        if not re.fullmatch(r"[A-Za-z0-9_.:+-]+", label):
            raise cfg.error((*key, "label"), f"use letters, digits and _ . : + - only, got {label!r}")
        aspects = m.get("aspects")
        if aspects is not None:
            if (
                isinstance(aspects, str)
                or not isinstance(aspects, list)
                or not aspects
                or not all(isinstance(a, str) and a.strip() for a in aspects)
            ):
                raise cfg.error(
                    (*key, "aspects"), f"expected a non-empty list of non-empty strings, got {aspects!r}"
                )
            if len(set(aspects)) != len(aspects):
                raise cfg.error((*key, "aspects"), f"aspects repeat: {aspects!r}")
        spec = MetricSpec(
            name=name,
            label=label,
            aspects=list(aspects) if aspects else None,
            options={k: v for k, v in m.items() if k not in RUNNER_METRIC_KEYS},
            index=i,
        )
        for col in spec.columns():
            if col in columns:
                raise cfg.error(
                    (*key, "label" if "label" in m else "name"),
                    f"column {col!r} is already produced by metrics[{columns[col]}]; give this entry "
                    'a different label = "..."',
                )
            columns[col] = i
        cfg.metrics.append(spec)

    if cfg.run.rank_by is not None and cfg.run.rank_by not in columns:
        raise cfg.error(
            ("run", "rank_by"),
            f"{cfg.run.rank_by!r} is not a metric column{_close(cfg.run.rank_by, list(columns))} "
            f"(columns: {', '.join(columns)})",
        )
    return cfg


def resolve_option_paths(cfg: LeaderboardConfig, options: Mapping[str, Any]) -> dict[str, Any]:
    """String options that name a path relative to the config (``./x``, ``../x``, or an existing file or
    folder next to it) become absolute; anything else (hub ids, attribute-set names) is left alone: the
    options a metric of ``cfg`` is built with (and its weights checked with, before torch is imported).

    >>> from types import SimpleNamespace
    >>> resolve_option_paths(SimpleNamespace(base_dir=Path("/runs/board")), {"weights": "./models/dino", "heads": "org/heads", "max_db": 60})
    {'weights': '/runs/board/models/dino', 'heads': 'org/heads', 'max_db': 60}
    """
    out = {}
    for k, v in options.items():
        if isinstance(v, str) and v.startswith("~"):
            v = str(expand_user(v, what=f"option {k}"))
        if isinstance(v, str) and v and not Path(v).is_absolute():
            p = cfg.base_dir / v
            if v.startswith(("./", "../", ".\\", "..\\")) or p.exists():
                v = str(p.resolve())
        out[k] = v
    return out
