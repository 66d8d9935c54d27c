"""The real configurations: typed numbers equal their sources (open_clip's shipped JSON, the table in
docs/real_size.md), the analytic parameter count equals a build of the architecture (on the meta device: no
memory) and the published size within 1%, the reduced variants keep the structure, token ids and
processors are the real checkpoints' where it matters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from genmetrics.backbones import real_configs as rc
from genmetrics.testing import real_models as rm
from genmetrics.testing.tiny_vlm import TINY_VOCAB_SIZE

DOC = Path(__file__).resolve().parents[2] / "docs" / "real_size.md"


def _n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["ViT-B-32-quickgelu", "ViT-B-16-quickgelu", "ViT-L-14-quickgelu"])
def test_clip_configs_equal_open_clips_shipped_json(name):
    import open_clip

    path = Path(open_clip.__file__).parent / "model_configs" / f"{name}.json"
    shipped = json.loads(path.read_text())
    typed = dict(rc.REAL_CONFIGS[name].config)
    assert typed == shipped


def _doc_table() -> dict[str, dict[str, str]]:
    """The table under '## Configurations' in docs/real_size.md: {model: {column: cell}}."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split("## Configurations", 1)[1].split("\n## ", 1)[0]
    rows = [r.strip() for r in block.splitlines() if r.strip().startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    out = {}
    for r in rows[2:]:
        cells = [c.strip().strip("`") for c in r.strip("|").split("|")]
        out[cells[0]] = dict(zip(head, cells))
    return out


def _num(cell: str) -> float:
    return float(re.sub(r"[,\s]", "", cell))


def test_typed_configs_equal_the_numbers_in_the_docs():
    table = _doc_table()
    assert set(table) == set(rc.REAL_CONFIGS)
    for name, e in rc.REAL_CONFIGS.items():
        row, c = table[name], e.config
        if e.kind == "open_clip":
            v, t = c["vision_cfg"], c["text_cfg"]
            vision = (v["layers"], v["width"], v["width"] // 64, 4 * v["width"], v["patch_size"])
            text = (t["layers"], t["width"], t["heads"], 4 * t["width"], t["vocab_size"])
        else:
            v, t = c["vision_config"], c["text_config"]
            vision = (v["depth"], v["hidden_size"], v["num_heads"], v["intermediate_size"], v["patch_size"])
            text = (
                t["num_hidden_layers"],
                t["hidden_size"],
                t["num_attention_heads"],
                t["intermediate_size"],
                t["vocab_size"],
            )
        got_vision = tuple(int(x) for x in row["vision: layers / width / heads / MLP / patch"].split("/"))
        got_text = tuple(int(x) for x in row["text: layers / width / heads / MLP / vocab"].split("/"))
        assert got_vision == vision, name
        assert got_text == text, name
        assert _num(row["published parameters"]) == e.published_params, name
        assert row["family"] == e.family


@pytest.mark.parametrize("name", list(rc.REAL_CONFIGS))
def test_analytic_count_equals_a_build_and_the_published_size(name):
    built = rm.build_real_model(name, device="meta")
    n = rc.count_parameters(name)
    assert _n_params(built) == n
    published = rc.REAL_CONFIGS[name].published_params
    assert abs(n - published) <= 0.01 * published


@pytest.mark.slow  # five CPU builds with random weights, a few seconds each
@pytest.mark.parametrize("name", list(rc.REAL_CONFIGS))
def test_reduced_count_equals_a_cpu_build(name):
    # a real build (weights in memory), so the formulas are checked against materialised modules too
    assert _n_params(rm.build_real_model(name, reduced=True)) == rc.count_parameters(name, reduced=True)


def test_qwen_counts_are_exact_and_the_components_add_up():
    # the Qwen checkpoints' published sizes are exact element counts: no tolerance needed
    assert rc.count_parameters("Qwen3-VL-Embedding-2B") == 2_127_532_032
    assert rc.count_parameters("Qwen3.5-0.8B") == 852_985_920
    m = rm.build_real_model("Qwen3-VL-Embedding-2B", device="meta")
    vision = _n_params(m.visual)
    # the published split of the 2B checkpoint: 406,957,056 vision + 1,720,574,976 language
    assert (vision, _n_params(m.language_model)) == (406_957_056, 1_720_574_976)


def test_unknown_names_are_one_clear_error():
    from genmetrics.errors import InputError

    with pytest.raises(InputError, match="unknown; expected one of"):
        rc.count_parameters("ViT-H-14")
    with pytest.raises(InputError, match="open_clip model"):
        rm.hf_config("ViT-B-16-quickgelu")


def test_reduced_vocabulary_is_the_tiny_tokenizers():
    """reduced_config's vocabulary (product code) and the tiny tokenizer's (testing) are typed twice, because
    product code never imports genmetrics.testing: they must stay equal so the tiny ids index real rows."""
    assert rc.REDUCED_VOCAB_SIZE == TINY_VOCAB_SIZE
    assert rc.reduced_config("Qwen3.5-0.8B")["text_config"]["vocab_size"] == TINY_VOCAB_SIZE
