"""Upstream's side of `glm5v bench` (run by the glm5v binary with the venv's python; not in CI).

    python bench_upstream.py prep REPS IMAGE...
    python bench_upstream.py cpu|cpu-bf16 REPS[,REPS...] MODEL_DIR PIXELS.safetensors [step]
    python bench_upstream.py gpu REPS MODEL_DIR PIXELS.safetensors [DEVICE [MODES]]
    python bench_upstream.py images OUT_DIR   (writes the default prep inputs)

prep: times `Glm5NextImageProcessor()(images=load_image(path))` per image (and load_image alone).
cpu-bf16: the same in bf16 with SDPA (`python bench_upstream.py cpu-bf16 ...`), the model built
      as on the GPU (`gpu_model` on the CPU device).
cpu:  times `Glm5NextVisionModel` f32 eager forwards on the batches in PIXELS (tensors
      `pixel_values.<k>` / `image_grid_thw.<k>`), weights loaded from MODEL_DIR; REPS per batch
      (one value for all, or one per batch, comma-separated). With `step`, after each batch's
      warm-up it prints {"what": "ready", "index"} and then runs one forward per line read from
      stdin, "go" (timed) or "warm" (not), printing {"what": "rep", "index", "ms", "timed"} after
      each, until it has REPS timed ones: the caller takes turns with it, so that both sides'
      forwards sample the same minutes of a machine whose speed drifts.
gpu:  times `Glm5NextVisionModel` bf16 forwards with attn_implementation "sdpa" on DEVICE (default
      cuda) on the same batches, eager and under `torch.compile(model)` (MODES, default
      "eager,compiled"; dynamo is reset per batch, so each batch compiles for its own shapes). CUDA
      events around `model(px, grid_thw=grid)` under no_grad; warm-ups first. One JSON line per
      batch: {"what": "gpu", "index", "<mode>_median_ms" (null when that mode failed, e.g. out of
      memory, with "<mode>_error"), "<mode>_min_ms", "<mode>_ms", "<mode>_first_call_s"}.
Prints one JSON object per measurement on stdout: {"what", "median_ms", "min_ms", "reps", ...};
progress goes to stderr.
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


def cpu(reps, model_dir, pixels, step=False, bf16=False):
    import torch
    from safetensors.torch import load_file

    if bf16:
        # upstream's CPU bf16: the model in bf16 with SDPA, as `from_pretrained(dtype=bf16)`
        model = gpu_model(model_dir, "cpu")
    else:
        model = f32_model(model_dir)
    batches = load_file(pixels)
    k = 0
    while f"pixel_values.{k}" in batches:
        px, grid = batches[f"pixel_values.{k}"], batches[f"image_grid_thw.{k}"]
        n = reps[min(k, len(reps) - 1)]
        with torch.no_grad():
            model(px, grid_thw=grid)  # warm-up
            if step:
                # one forward per line on stdin, taking turns with the caller's forwards: "go" a
                # timed one, "warm" an untimed one (after the other side's turn)
                print(json.dumps({"what": "ready", "index": k}), flush=True)
                ts = []
                while len(ts) < n:
                    cmd = sys.stdin.readline().strip()
                    if cmd not in ("go", "warm"):
                        raise SystemExit(f"bench_upstream: expected go or warm on stdin, got {cmd!r}")
                    _, t = timed(lambda: model(px, grid_thw=grid), 1)
                    if cmd == "go":
                        ts += t
                    print(json.dumps({"what": "rep", "index": k, "ms": t[0], "timed": cmd == "go"}), flush=True)
            else:
                _, ts = timed(lambda: model(px, grid_thw=grid), n)
        emit("cpu", ts, grid=[int(x) for x in grid[0]], threads=torch.get_num_threads(),
             precision="bf16" if bf16 else "f32")
        k += 1
    print(json.dumps({"what": "peak_rss_mb", "value": peak_rss_mb()}), flush=True)


def peak_rss_mb():
    """This process's peak resident memory in MB: VmHWM of /proc/self/status (Linux), which starts
    afresh at exec. (`ru_maxrss` keeps the parent's peak across fork + exec, so a child started
    by a 3.3 GB glm5v process reported 3.3 GB whatever it used itself.)"""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def log(msg):
    print(f"bench_upstream: {msg}", file=sys.stderr, flush=True)


def load_visual_state_dict(model_dir, dtype):
    """The `model.visual.*` tensors of every shard in MODEL_DIR, prefix stripped, cast to dtype."""
    import glob

    from safetensors.torch import load_file

    prefix = "model.visual."
    sd = {}
    for f in sorted(glob.glob(f"{model_dir}/*.safetensors")):
        sd.update({k[len(prefix):]: v.to(dtype) for k, v in load_file(f).items() if k.startswith(prefix)})
    return sd


def f32_model(model_dir):
    """Glm5NextVisionModel in f32 with eager attention on the CPU (upstream's default path),
    weights from MODEL_DIR (strict)."""
    import torch
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

    cfg = json.load(open(f"{model_dir}/config.json"))
    vc = Glm5NextVisionConfig(**cfg.get("vision_config", cfg))
    vc._attn_implementation = "eager"
    model = Glm5NextVisionModel(vc).float().eval()
    model.load_state_dict(load_visual_state_dict(model_dir, torch.float32), strict=True)
    return model


def device_model(model_dir, device):
    """The model a user runs on `device`: f32 eager on the CPU, bf16 SDPA elsewhere."""
    return f32_model(model_dir) if device == "cpu" else gpu_model(model_dir, device)


def gpu_model(model_dir, device):
    """Glm5NextVisionModel in bf16 with SDPA attention on `device`, weights from MODEL_DIR (strict).

    Built with bf16 as the default dtype, as `from_pretrained(dtype=torch.bfloat16)` does, so the
    rope's inv_freq buffer stays f32."""
    import torch
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

    cfg = json.load(open(f"{model_dir}/config.json"))
    cfg = cfg.get("vision_config", cfg)
    vc = Glm5NextVisionConfig(**cfg)
    vc._attn_implementation = "sdpa"
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = Glm5NextVisionModel(vc)
    finally:
        torch.set_default_dtype(prev)
    model.eval()
    model.load_state_dict(load_visual_state_dict(model_dir, torch.bfloat16), strict=True)
    return model


def gpu(reps, model_dir, pixels, device="cuda", modes=("eager", "compiled")):
    import torch
    import torch._dynamo
    import transformers
    from safetensors.torch import load_file

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    t0 = time.perf_counter()
    model = gpu_model(model_dir, dev)
    log(f"model ready in {time.perf_counter() - t0:.1f} s on {dev} (torch {torch.__version__}, "
        f"transformers {transformers.__version__})")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def once(fn):
        """Milliseconds of one call: CUDA events on a GPU, the wall clock elsewhere."""
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    batches = load_file(pixels)
    k = 0
    while f"pixel_values.{k}" in batches:
        px = batches[f"pixel_values.{k}"].to(dev, torch.bfloat16)
        grid = batches[f"image_grid_thw.{k}"].to(dev)
        n = int(px.shape[0])
        rec = {"what": "gpu", "index": k, "patches": n, "images": int(grid.shape[0]),
               "device": torch.cuda.get_device_name(dev) if cuda else str(dev),
               "torch": torch.__version__, "transformers": transformers.__version__}
        for mode in modes:
            fn = None
            try:
                if mode == "compiled":
                    torch._dynamo.reset()
                    fn, warm = torch.compile(model), 3
                elif mode == "eager":
                    fn, warm = model, (1 if n > 20000 else 2)
                else:
                    raise ValueError(f"unknown mode {mode!r} (eager, compiled)")
                log(f"batch {k} ({n} patches): {mode}")
                with torch.no_grad():
                    t = time.perf_counter()
                    fn(px, grid_thw=grid)  # the first call compiles under torch.compile
                    sync()
                    rec[f"{mode}_first_call_s"] = time.perf_counter() - t
                    for _ in range(warm):
                        fn(px, grid_thw=grid)
                    sync()
                    ts = [once(lambda: fn(px, grid_thw=grid)) for _ in range(reps)]
                rec[f"{mode}_median_ms"] = statistics.median(ts)
                rec[f"{mode}_min_ms"] = min(ts)
                rec[f"{mode}_ms"] = ts
            except Exception as e:  # out of memory, a compile failure: this column is n/a
                msg = (str(e).strip().splitlines() or [""])[0][:300]
                rec[f"{mode}_median_ms"] = None
                rec[f"{mode}_error"] = f"{type(e).__name__}: {msg}"
                log(f"batch {k} {mode} failed: {rec[f'{mode}_error']}")
            finally:
                fn = None
                if cuda:
                    torch.cuda.empty_cache()
        print(json.dumps(rec), flush=True)
        del px, grid
        k += 1
    torch._dynamo.reset()


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
    kind = sys.argv[1]
    reps = [int(r) for r in sys.argv[2].split(",")]  # one count per batch (cpu) or one for all
    if kind == "prep":
        prep(reps[0], sys.argv[3:])
    elif kind == "gpu":
        device = sys.argv[5] if len(sys.argv) > 5 else "cuda"
        modes = tuple(sys.argv[6].split(",")) if len(sys.argv) > 6 else ("eager", "compiled")
        gpu(reps[0], sys.argv[3], sys.argv[4], device, modes)
    elif kind in ("cpu", "cpu-bf16"):
        cpu(reps, sys.argv[3], sys.argv[4], step=sys.argv[5:6] == ["step"], bf16=kind == "cpu-bf16")
    else:
        raise SystemExit(f"bench_upstream: unknown kind {kind!r}")
