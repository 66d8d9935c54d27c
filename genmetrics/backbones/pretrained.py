"""open_clip's download records of the weights genmetrics' metrics load by default, kept here in the form
of ``open_clip/pretrained.py`` (``hf_hub``: ``org/repo/`` or ``org/repo/file``; ``url``), so that
``genmetrics weights list|download`` and ``weights_kind`` resolve them without importing open_clip (seconds
of import, torch included): offline, ``genmetrics weights download clipscore`` fails after the start-up alone.

Only the download fields are recorded (the preprocessing stays open_clip's). Weights not recorded here are
resolved by open_clip itself, as before. ``tests/backbones/test_pretrained.py`` checks every record against
the installed open_clip, and that every metric's default open_clip weights are recorded.

Nothing here imports torch or open_clip.
"""

from __future__ import annotations

__all__ = ["HF_WEIGHTS_NAME", "OPEN_CLIP_PRETRAINED", "SAFE_ALTERNATIVES", "open_clip_record"]

#: ``MODEL/TAG`` -> open_clip's pretrained record (its download fields)
OPEN_CLIP_PRETRAINED: dict[str, dict[str, str]] = {
    "ViT-B-32-quickgelu/openai": {
        "url": "https://openaipublic.azureedge.net/clip/models/"
        "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt",
        "hf_hub": "timm/vit_base_patch32_clip_224.openai/",
    },
}
#: the file open_clip fetches from a hub repo named without one (``open_clip.pretrained.HF_WEIGHTS_NAME``)
HF_WEIGHTS_NAME = "open_clip_pytorch_model.bin"
#: the ``.safetensors`` files open_clip looks for on the hub before a file, in its order
SAFE_ALTERNATIVES: dict[str, tuple[str, ...]] = {HF_WEIGHTS_NAME: ("open_clip_model.safetensors",)}


def open_clip_record(weights: str) -> dict[str, str] | None:
    """The recorded download fields of open_clip weights ``MODEL/TAG`` (a copy), ``None`` when not recorded.

    >>> open_clip_record("ViT-B-32-quickgelu/openai")["hf_hub"], open_clip_record("ViT-B-16/laion2b_s34b_b88k")
    ('timm/vit_base_patch32_clip_224.openai/', None)
    """
    record = OPEN_CLIP_PRETRAINED.get(weights)
    return dict(record) if record is not None else None
