#!/usr/bin/env python3
"""Builds the tiny upstream fixture of the reference crate's end-to-end test.

Pinned: transformers 5.23.0, torch 2.15.0 (CPU). Run from anywhere:

    /path/to/venv/bin/python reference/tests/data/gen_tiny_upstream.py

It writes reference/tests/data/tiny/:
  config.json        full model config (`model_type` glm5_next, vision fields under `vision_config`)
  model.safetensors  the tower's weights, BF16, named `model.visual.<state_dict name>`
  taps.safetensors   a TAPS.md tap dump of one forward (F32 2-D taps, pixel_values, image_grid_thw)

The tower is tiny (depth 2, hidden 64, 4 heads, MLP 128, out 96, merger 160) and "sharp": norm
weights far from 1, biases far from 0, gate/up projections scaled so the SwiGLU clamp (limit 2.5)
bites in both MLPs. The weights are rounded to BF16 before the forward, so the BF16 checkpoint
holds exactly the values upstream ran with (in f32). The batch packs two images and one video of
two frame pairs (grid rows [1,4,6], [1,6,4], [2,4,4]: 4 attention segments, 80 patches).
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig

PINNED = {"transformers": "5.23.0", "torch": "2.15.0"}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny")


def main():
    for mod, want in (("transformers", transformers.__version__), ("torch", torch.__version__)):
        if not want.startswith(PINNED[mod]):
            sys.exit(f"{mod} {want} is installed, this fixture is pinned to {PINNED[mod]}")
    torch.manual_seed(20260529)
    vision = dict(
        depth=2, hidden_size=64, num_heads=4, intermediate_size=128, out_hidden_size=96,
        projection_intermediate_size=160, rms_norm_eps=1e-5, swiglu_limit=2.5,
        rope_parameters={"rope_theta": 10000.0, "rope_type": "axial"},
    )
    cfg = Glm5NextVisionConfig(**vision)
    cfg._attn_implementation = "eager"
    model = Glm5NextVisionModel(cfg).eval().float()

    # Sharp weights, then rounded to BF16 (exactly representable in the BF16 checkpoint).
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 1
            if "norm" in name and name.endswith("weight"):
                v = 1.0 + 0.5 * torch.randn_like(p)
            elif name.endswith("bias"):
                v = 0.2 * torch.randn_like(p)
            else:
                v = torch.randn_like(p) / fan_in ** 0.5
                if "gate_proj" in name or "up_proj" in name:
                    v *= 2.5  # pushes |gate|, |up| past the limit 2.5 on a good share of entries
            p.copy_(v.to(torch.bfloat16).float())

    grid = torch.tensor([[1, 4, 6], [1, 6, 4], [2, 4, 4]], dtype=torch.int64)
    n = int((grid[:, 0] * grid[:, 1] * grid[:, 2]).sum())
    pixel_values = torch.randn(n, cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2)

    taps = {}

    def put(name, t):
        t = t.detach().float()
        taps[name] = t.reshape(t.shape[0], -1).clone()

    def hook(name):
        def f(_m, _inp, out):
            if name == "rotary_pos_emb":
                put("rotary_pos_emb.cos", out[0])
                put("rotary_pos_emb.sin", out[1])
            else:
                put(name, out)
        return f

    def pre_hook(name):
        def f(_m, inp):
            put(name, inp[0])
        return f

    names = ["patch_embed", "rotary_pos_emb", "post_layernorm", "downsample", "merger"]
    names += [f"merger.{s}" for s in ("proj", "post_projection_norm", "act1", "gate_proj", "up_proj", "down_proj")]
    for i in range(cfg.depth):
        names += [f"blocks.{i}"] + [f"blocks.{i}.{s}" for s in
                  ("norm1", "norm2", "attn", "attn.qkv", "attn.q_norm", "attn.k_norm", "mlp")]
    modules = dict(model.named_modules())
    handles = [modules[nm].register_forward_hook(hook(nm)) for nm in names]
    handles += [modules[f"blocks.{i}.attn.proj"].register_forward_pre_hook(pre_hook(f"blocks.{i}.attn.proj.input"))
                for i in range(cfg.depth)]
    with torch.no_grad():
        out = model(pixel_values, grid).pooler_output
    for h in handles:
        h.remove()
    assert torch.equal(out, taps["merger"])

    # Upstream's own eager-vs-SDPA disagreement on the final output.
    model.config._attn_implementation = "sdpa"
    for blk in model.blocks:
        blk.attn.config._attn_implementation = "sdpa"
    with torch.no_grad():
        out_sdpa = model(pixel_values, grid).pooler_output
    self_dis = float((out_sdpa - out).norm() / out.norm())

    # How often the clamps bite (reported, and asserted non-trivial).
    with torch.no_grad():
        x = taps["blocks.0.norm2"]
        g = model.blocks[0].mlp.gate_proj(x)
        u = model.blocks[0].mlp.up_proj(x)
    frac_gate = float((g > cfg.swiglu_limit).float().mean())
    frac_up = float((u.abs() > cfg.swiglu_limit).float().mean())
    frac_mg = float((taps["merger.gate_proj"] > cfg.swiglu_limit).float().mean())
    frac_mu = float((taps["merger.up_proj"].abs() > cfg.swiglu_limit).float().mean())
    assert min(frac_gate, frac_up, frac_mg, frac_mu) > 0.01, (frac_gate, frac_up, frac_mg, frac_mu)

    os.makedirs(OUT, exist_ok=True)
    full = {"model_type": "glm5_next", "vision_config": {**vision, "hidden_act": "silu", "attention_bias": True,
            "in_channels": 3, "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2}}
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(full, f, indent=2)
        f.write("\n")
    weights = {f"model.visual.{k}": v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(weights, os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})
    tensors = dict(taps)
    tensors["pixel_values"] = pixel_values.contiguous()
    tensors["image_grid_thw"] = grid.contiguous()
    meta = {"producer": "transformers", "version": transformers.__version__, "precision": "f32",
            "torch": torch.__version__, "attn_implementation": "eager",
            "self_disagreement": f"{self_dis:.3e}", "checkpoint": "tiny (gen_tiny_upstream.py)"}
    save_file(tensors, os.path.join(OUT, "taps.safetensors"), metadata=meta)
    print(f"wrote {OUT}: {len(taps)} taps, N={n}, self_disagreement={self_dis:.3e}, clamp bites: "
          f"gate {frac_gate:.2f} up {frac_up:.2f} merger gate {frac_mg:.2f} merger up {frac_mu:.2f}")


if __name__ == "__main__":
    main()
