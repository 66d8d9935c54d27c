"""The authors' scoring contract re-implemented for the tests, without genmetrics code (MIE_Inference/
README.md and mie_loader.py's ``score``; mie/model.py's forward): one chat turn with the reference images,
the candidate last and the fixed text, through ``processor(text, images)``; the final hidden state of the
last valid token into the two fp32 heads."""

from __future__ import annotations

import torch

TEMPLATE = (
    "You are evaluating a multi-subject personalization result. The first images are subject references. "
    "The last image is the generated candidate. Prompt: {prompt}"
)
KEEP = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")


def authors_inputs(processor, refs, prompt, cand):
    content = [{"type": "image"} for _ in refs] + [
        {"type": "image"},
        {"type": "text", "text": TEMPLATE.format(prompt=prompt)},
    ]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=False
    )
    return processor(text=[text], images=[*refs, cand], return_tensors="pt", padding=False, truncation=False)


@torch.no_grad()
def authors_score(backbone, score_head, classification_head, processor, refs, prompt, cand):
    """``(score [1], logits [1,3])`` of one candidate, as the authors' forward computes them."""
    x = authors_inputs(processor, refs, prompt, cand)
    out = backbone(**{k: v for k, v in x.items() if k in KEEP}, output_hidden_states=True)
    last = x["attention_mask"].sum(1).long() - 1
    h = out.hidden_states[-1][torch.arange(1), last].float()
    return score_head(h).squeeze(-1), classification_head(h)
