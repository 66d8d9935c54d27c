import json
import resource
import sys

import torch

import genmetrics as gm
from genmetrics.baselines import pixel

if sys.argv[2] == "old":
    pixel.WINDOWED_CHUNK_ELEMENTS = 1 << 40
if sys.argv[2] == "small":
    pixel.WINDOWED_CHUNK_ELEMENTS = 1 << 19
g = torch.Generator().manual_seed(0)
ref = torch.rand(64, 3, 256, 256, generator=g)
cand = torch.rand(64, 3, 256, 256, generator=g)
m = gm.create_metric(sys.argv[1])
m.score(ref[:1], cand[:1])
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
m.update(reference=ref, candidates=cand)
m.compute()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(
    json.dumps(
        {
            "metric": sys.argv[1],
            "mode": sys.argv[2],
            "input_mb": 96.0,
            "peak_over_start_mb": round(peak - start, 1),
        }
    )
)
