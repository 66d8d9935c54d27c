"""TPIPS constants and text helpers shared by every variant: default weights, temperatures, the prompts of
Appendix C.1 / C.3, aspect validation and the exact float64 cosine."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.errors import InputError
from genmetrics.tpips.hints import CONFIG_NAME as CONFIG_NAME  # defined where no torch is imported

DEFAULT_WEIGHTS = "Qwen/Qwen3-VL-Embedding-2B"
WEIGHTS_8B = "Qwen/Qwen3-VL-Embedding-8B"
TRIPLET_WEIGHTS = "Qwen/Qwen3-VL-8B-Instruct"
VARIANTS = ("late", "mid", "early")
DEFAULT_TEMPERATURE = {"late": 0.05, "early": 0.05, "mid": 0.0025}
DEFAULT_IMAGE_SIZE = 448  # side of the "square" resize policy
RESIZE_MODES = ("smart", "square")
HEAD_NAME = "tpips_head.safetensors"
FORMAT = "genmetrics.tpips/1"

#: (template with {aspect}, template for the "overall" aspect) per prompt family (Appendix C.1, C.3)
PROMPTS: dict[str, tuple[str, str]] = {
    "late": (
        "Represent the similarity of the image based on {aspect}.",
        "Represent the similarity of the image.",
    ),
    "mid": (
        "Represent the similarity of the image based on {aspect}.",
        "Represent the similarity of the image.",
    ),
    "early": (
        "Measure the similarity between the two images based on {aspect}.",
        "Measure the similarity between the two images.",
    ),
    # Appendix C.3 zero-shot embedding baseline (Qwen3-VL-Embedding).
    "embedding_baseline": (
        "Represent the visual similarity of this image in terms of {aspect}.",
        "Represent the visual similarity of this image.",
    ),
    "triplet": (
        "I provide three horizontally concatenated images (left, middle, right). Which image is the most "
        "different among the three in terms of {aspect}? You need to choose: left, middle, right. Answer:",
        "I provide three horizontally concatenated images (left, middle, right). Which image is the most "
        "different among the three? You need to choose: left, middle, right. Answer:",
    ),
    "triplet_2afc": (
        "I provide three horizontally concatenated images. The center image is the reference. Which "
        "candidate (left or right) is more similar to the reference in terms of {aspect}? Answer with "
        "one word: left or right. Answer:",
        "I provide three horizontally concatenated images. The center image is the reference. Which "
        "candidate (left or right) is more similar to the reference? Answer with one word: left or "
        "right. Answer:",
    ),
    "pairwise": (
        "I show you two images placed side by side (left and right). Rate how similar these two images "
        "are in terms of {aspect} on a scale of 0 to 10, where 0 means completely different and 10 means "
        "identical. Answer with a single number from 0 to 10. Answer:",
        "I show you two images placed side by side (left and right). Rate how similar these two images "
        "are overall on a scale of 0 to 10, where 0 means completely different and 10 means identical. "
        "Answer with a single number from 0 to 10. Answer:",
    ),
}

MAX_ASPECT_TOKENS = 128
#: prompt families whose text is an embedder instruction (the system turn), finished as the official embedder
#: finishes instructions (:func:`finish_instruction`)
INSTRUCTION_FAMILIES = ("late", "mid", "early", "embedding_baseline")


# --------------------------------------------------------------------------------------------- helpers
def is_overall(aspect: str) -> bool:
    """Whether ``aspect`` is the aspect-free "overall" (case, spaces and a final full stop ignored).

    >>> is_overall(" Overall."), is_overall("overall lighting")
    (True, False)
    """
    return aspect.strip().rstrip(".").strip().lower() == "overall"


def check_prompts(prompts: Any, family: str, *, name: str = "prompts") -> tuple[str, str]:
    """``(template containing {aspect}, template for "overall")``; None: the paper's prompts of ``family``.

    >>> check_prompts(["Compare {aspect}.", "Compare."], "late")  # a list from a JSON config
    ('Compare {aspect}.', 'Compare.')
    >>> check_prompts(("Compare.",), "late")
    Traceback (most recent call last):
    ...
    genmetrics.errors.InputError: prompts: expected (template containing '{aspect}', template for 'overall'), got ('Compare.',)
    """
    if prompts is None:
        return PROMPTS[family]
    p = tuple(prompts) if isinstance(prompts, Sequence) and not isinstance(prompts, str) else ()
    if len(p) != 2 or not all(isinstance(t, str) for t in p) or "{aspect}" not in p[0]:
        raise InputError(
            f"{name}: expected (template containing '{{aspect}}', template for 'overall'), got {prompts!r}"[
                :300
            ]
        )
    return p[0], p[1]


def finish_instruction(text: str) -> str:
    """An instruction as the official Qwen3-VL-Embedding embedder sends it: stripped, and a full stop added
    unless it already ends in punctuation (any Unicode ``P*`` category: ``.``, ``?``, ``!``, ``)``, ``:``...).

    >>> finish_instruction(" Compare the colour "), finish_instruction("Is it red?"), finish_instruction("Compare.")
    ('Compare the colour.', 'Is it red?', 'Compare.')
    """
    text = text.strip()
    if text and not unicodedata.category(text[-1]).startswith("P"):
        text += "."
    return text


def prompt_for(family: str, aspect: str, prompts: tuple[str, str] | None = None) -> str:
    """The instruction for ``aspect`` (``"overall"`` drops the "based on <c>" part). For the instruction
    families (late, mid, early fusion, the embedding baseline) a custom template's result is finished as the
    official embedder finishes instructions (:func:`finish_instruction`: a final full stop when it has no final
    punctuation).

    >>> prompt_for("late", "color."), prompt_for("late", "Overall")
    ('Represent the similarity of the image based on color.', 'Represent the similarity of the image.')
    >>> prompt_for("late", "color", ("Compare {aspect}", "Compare"))  # custom templates get the full stop
    'Compare color.'
    """
    template, overall = prompts if prompts is not None else PROMPTS[family]
    if is_overall(aspect):
        text = overall
    else:
        a = aspect.strip()
        while a.endswith("."):
            a = a[:-1].rstrip()
        text = template.format(aspect=a)
    return finish_instruction(text) if family in INSTRUCTION_FAMILIES else text


def check_aspects(aspects: Any, n: int, *, name: str = "aspects") -> list[str]:
    """A string (used for all ``n`` samples) or a list of ``n`` non-empty strings -> list of ``n`` strings.

    >>> check_aspects("color", 2)
    ['color', 'color']
    >>> check_aspects(["color"], 2)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: aspects: got 1 aspects for 2 image pairs; pass one aspect per pair (or a single string for all)
    """
    if isinstance(aspects, str):
        aspects = [aspects] * n
    if not isinstance(aspects, Sequence) or isinstance(aspects, (bytes, bytearray)):
        raise InputError(f"{name}: expected a string or a list of strings, got {type(aspects).__name__}")
    aspects = list(aspects)
    if len(aspects) != n:
        raise InputError(
            f"{name}: got {len(aspects)} aspects for {n} image pairs; pass one aspect per pair "
            "(or a single string for all)"
        )
    for i, a in enumerate(aspects):
        if not isinstance(a, str):
            raise InputError(f"{name}[{i}]: expected a string, got {type(a).__name__} {a!r}"[:200])
        if not a.strip():
            raise InputError(
                f"{name}[{i}]: the aspect is empty or whitespace only; give a text such as "
                "'lighting' or 'overall'"
            )
    return aspects


def unit_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine of the rows of ``a`` and ``b`` as ``1 - ||u - v||^2 / 2`` of the float64 unit vectors: exactly 1
    for bitwise-equal inputs and exactly symmetric, in [-1, 1].

    >>> a, b = torch.tensor([[3.0, 4.0]]), torch.tensor([[4.0, 3.0]])
    >>> unit_cosine(a, a).item(), unit_cosine(a, b).item() == unit_cosine(b, a).item(), round(unit_cosine(a, b).item(), 6)
    (1.0, True, 0.96)
    """
    u = F.normalize(a.double(), dim=-1, eps=1e-300)
    v = F.normalize(b.double(), dim=-1, eps=1e-300)
    return (1.0 - 0.5 * ((u - v) ** 2).sum(-1)).clamp(-1.0, 1.0)
