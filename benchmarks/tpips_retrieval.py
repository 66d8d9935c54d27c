"""Retrieval query latency over a 100k x 2048 index (the size of Qwen3-VL-Embedding-2B embeddings), through
AspectIndex.search with a stub query encoder (the embedding of the query image is not timed here).

Measures the median latency of: a single-aspect faiss Flat (exact inner product) top-10 query; the adjusted
query f(aspect) - 0.3 f(overall) (exact over all rows); a 2-term compositional query. Prints one JSON line.
N and DIM can be changed through the environment."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]


class _StubModel:
    variant = "late"

    def __init__(self, dim: int):
        self.dim = dim
        self.g = torch.Generator().manual_seed(0)

    def load_images(self, images, name="images"):
        return list(images)

    def embed(self, images, aspects):
        z = torch.randn(len(images), self.dim, generator=self.g)
        return torch.nn.functional.normalize(z, dim=-1)


def main() -> None:
    import faiss

    from genmetrics.tpips.retrieval import INDEX_FORMAT, MANIFEST, AspectIndex, _slug, _write_faiss

    n = int(os.environ.get("N", 100_000))
    dim = int(os.environ.get("DIM", 2048))
    faiss.omp_set_num_threads(int(os.environ.get("THREADS", 2)))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        entries = {}
        t0 = time.perf_counter()
        for aspect in ("lighting", "color", "overall"):
            emb = np.lib.format.open_memmap(
                root / f"emb_{_slug(aspect)}.npy", mode="w+", dtype=np.float32, shape=(n, dim)
            )
            for s in range(0, n, 20_000):
                x = rng.standard_normal((min(20_000, n - s), dim), dtype=np.float32)
                emb[s : s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
            emb.flush()
            _write_faiss(emb, "Flat", root / f"faiss_{_slug(aspect)}.index")
            entries[aspect] = {
                "embeddings": f"emb_{_slug(aspect)}.npy",
                "faiss": f"faiss_{_slug(aspect)}.index",
            }
            del emb
        build_s = time.perf_counter() - t0
        (root / MANIFEST).write_text(
            json.dumps(
                {
                    "format": INDEX_FORMAT,
                    "images": [f"img{i}.png" for i in range(n)],
                    "stats": [[0, 0]] * n,
                    "aspects": entries,
                    "dim": dim,
                    "factory": "Flat",
                    "fingerprint": None,
                    "model": {},
                }
            )
        )
        idx = AspectIndex(root)
        model = _StubModel(dim)

        def med(fn, reps=15):
            fn()
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            return round(1000 * statistics.median(ts), 2)

        single = med(lambda: idx.search(model, "q.png", "lighting", k=10, check=False))
        adjusted = med(lambda: idx.search(model, "q.png", "lighting", k=10, adjust=0.3, check=False))
        comp = med(lambda: idx.search(model, ["q1.png", "q2.png"], ["lighting", "color"], k=10, check=False))
    print(
        json.dumps(
            {
                "benchmark": "tpips_retrieval",
                "n": n,
                "dim": dim,
                "index": "faiss Flat (inner product)",
                "threads": faiss.omp_get_max_threads(),
                "build_s": round(build_s, 2),
                "query_ms_median": {
                    "single_aspect": single,
                    "adjusted_0.3_overall": adjusted,
                    "compositional_2_terms": comp,
                },
                "k": 10,
            }
        )
    )


if __name__ == "__main__":
    main()
