#!/usr/bin/env python3
"""Upstream's f32 CPU speed at the GLM-5.3-Flash geometry, for comparison with the
`full_geometry` example (same grids, same thread count, random weights).

    python reference/examples/upstream_speed.py [threads] [grid ...]   # defaults: 2, 8 32
"""
import sys
import time

import torch
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig
from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

args = [int(a) for a in sys.argv[1:]]
threads = args[0] if args else 2
grids = args[1:] or [8, 32]
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = Glm5NextVisionConfig(out_hidden_size=4096)
model = Glm5NextVisionModel(cfg).eval().float()
print(f"attn_implementation={model.config._attn_implementation}, threads={torch.get_num_threads()}")
for g in grids:
    px = torch.randn(g * g, 1176)
    grid = torch.tensor([[1, g, g]])
    best = best_cpu = float("inf")
    with torch.no_grad():
        for _ in range(5 if g <= 16 else 3):
            c = time.process_time()
            t = time.perf_counter()
            model(px, grid)
            best = min(best, time.perf_counter() - t)
            best_cpu = min(best_cpu, time.process_time() - c)
    print(f"upstream grid {g}x{g}: best {best:.3f} s; least CPU time {best_cpu:.2f} s")
