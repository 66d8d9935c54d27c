"""Vision-tower work per MIE pair: images through the tower when both candidates of a pair share the
references' vision output (goal: references + 2) vs scoring each candidate on its own (2 * references + 2).

Counts the images in every call of the backbone's vision tower (a forward hook on ``visual``), on the
tiny random Qwen3.5. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor

    model = MIEModel(tiny_qwen35(0), tiny_qwen35_processor(), tuning=None, max_length=4096).eval()
    seen: list[int] = []
    model.vlm.visual.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append(int(kwargs["grid_thw"].shape[0])), with_kwargs=True
    )
    imgs = random_images(12, 64, seed=0)
    shared, naive, calls = {}, {}, {}
    for k in range(2, 9):
        refs = [list(imgs[:k])]
        seen.clear()
        model.score_pairs(refs, ["a prompt"], [imgs[10]], [imgs[11]])
        shared[k], calls[k] = sum(seen), len(seen)
        seen.clear()
        model.score(refs, ["a prompt"], [imgs[10]])
        model.score(refs, ["a prompt"], [imgs[11]])
        naive[k] = sum(seen)
    print(
        json.dumps(
            {
                "benchmark": "mie_vision_calls_per_pair",
                "images_through_vision_tower_per_pair": shared,
                "tower_invocations_per_pair": calls,
                "without_sharing": naive,
                "goal": "references + 2",
                "meets_goal": all(shared[k] == k + 2 for k in shared),
            }
        )
    )


if __name__ == "__main__":
    main()
