"""Upstream's side of `glm5v bench` (run by the glm5v binary with the venv's python; not in CI).

    python bench_upstream.py prep REPS IMAGE...
    python bench_upstream.py cpu REPS MODEL_DIR PIXELS.safetensors
    python bench_upstream.py images OUT_DIR   (writes the default prep inputs)

prep: times `Glm5NextImageProcessor()(images=load_image(path))` per image (and load_image alone).
cpu:  times `Glm5NextVisionModel` f32 eager forwards on the batches in PIXELS (tensors
      `pixel_values.<k>` / `image_grid_thw.<k>`), weights loaded from MODEL_DIR.
Prints one JSON object per measurement on stdout: {"what", "median_ms", "min_ms", "reps", ...}.
Threads: torch's default (the core count), the same as the Rust side's rayon pool.
"""

import json
import resource
import statistics
import sys
import time


def timed(fn, reps):
    out, ts = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return out, ts


def emit(what, ts, **kw):
    print(json.dumps({"what": what, "median_ms": statistics.median(ts), "min_ms": min(ts), "reps": len(ts), **kw}), flush=True)


def prep(reps, paths):
    from transformers.image_utils import load_image
    from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor

    proc = Glm5NextImageProcessor()
    for p in paths:
        _, td = timed(lambda: load_image(p), reps)
        out, tp = timed(lambda: proc(images=load_image(p)), reps)
        emit("prep", tp, input=p, decode_median_ms=statistics.median(td), rows=int(out["pixel_values"].shape[0]))


def cpu(reps, model_dir, pixels):
    import torch
    from safetensors.torch import load_file
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

    cfg = json.load(open(f"{model_dir}/config.json"))
    cfg = cfg.get("vision_config", cfg)
    vc = Glm5NextVisionConfig(**cfg)
    vc._attn_implementation = "eager"
    model = Glm5NextVisionModel(vc).float().eval()
    prefix = "model.visual."
    import glob
    sd = {}
    for f in sorted(glob.glob(f"{model_dir}/*.safetensors")):
        sd.update({k[len(prefix):]: v.float() for k, v in load_file(f).items() if k.startswith(prefix)})
    model.load_state_dict(sd, strict=True)
    del sd
    batches = load_file(pixels)
    k = 0
    while f"pixel_values.{k}" in batches:
        px, grid = batches[f"pixel_values.{k}"], batches[f"image_grid_thw.{k}"]
        with torch.no_grad():
            model(px, grid_thw=grid)  # warm-up
            _, ts = timed(lambda: model(px, grid_thw=grid), reps)
        emit("cpu", ts, grid=[int(x) for x in grid[0]], threads=torch.get_num_threads())
        k += 1
    print(json.dumps({"what": "peak_rss_mb", "value": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


def make_images(out_dir):
    """The default bench inputs: a 4000x3000 photo-like JPEG (quality 90) and a 640x480 PNG."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for (w, h, name, fmt) in [(4000, 3000, "photo_4000x3000.jpg", "JPEG"), (640, 480, "screen_640x480.png", "PNG")]:
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        img = np.stack([
            127 + 100 * np.sin(x / 97.0) * np.cos(y / 131.0),
            127 + 90 * np.sin((x + y) / 211.0),
            127 + 80 * np.cos(x / 53.0 - y / 71.0),
        ], -1) + rng.normal(0, 12, (h, w, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(f"{out_dir}/{name}", fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        print(f"{out_dir}/{name}")


if __name__ == "__main__":
    if sys.argv[1] == "images":
        make_images(sys.argv[2])
        sys.exit(0)
    kind, reps = sys.argv[1], int(sys.argv[2])
    if kind == "prep":
        prep(reps, sys.argv[3:])
    else:
        cpu(reps, sys.argv[3], sys.argv[4])
