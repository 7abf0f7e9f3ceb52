"""Upstream's corpus loop as a user writes it, for `glm5v bench corpus`: every image file in DIR
(sorted), `load_image` + `Glm5NextImageProcessor` + `Glm5NextVisionModel` over batches of
BATCH images, results kept in memory. Prints one JSON line: images, seconds, images/s, peak RSS.

    python corpus_upstream.py MODEL_DIR DIR [--batch 8] [--device cpu|cuda]
"""
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import argparse

    import torch
    from transformers.image_utils import load_image
    from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor

    from bench_upstream import device_model, peak_rss_mb

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dir")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    model = device_model(a.model, a.device)
    proc = Glm5NextImageProcessor()
    paths = sorted(p for p in glob.glob(os.path.join(a.dir, "**", "*"), recursive=True) if os.path.isfile(p))
    start = time.perf_counter()
    results = []
    for i in range(0, len(paths), a.batch):
        images = [load_image(p) for p in paths[i:i + a.batch]]
        inputs = proc(images=images, return_tensors="pt")
        with torch.no_grad():
            out = model(inputs["pixel_values"].to(a.device), grid_thw=inputs["image_grid_thw"].to(a.device))
            out = getattr(out, "pooler_output", out)
            if isinstance(out, (tuple, list)):
                out = out[0]
            results.append(out.float().cpu())
    if a.device != "cpu":
        torch.cuda.synchronize()
    secs = time.perf_counter() - start
    print(json.dumps({"what": "corpus", "images": len(paths), "seconds": secs,
                      "images_per_s": len(paths) / secs, "peak_rss_mb": peak_rss_mb(),
                      "tokens": sum(r.shape[0] for r in results)}), flush=True)


if __name__ == "__main__":
    main()
