"""``python -m glm5v.bench``: glm5v's ImageProcessor against upstream's
``Glm5NextImageProcessor`` on the same files, in the same run.

- per image: the 4000x3000 JPEG and the 640x480 PNG of ``glm5v bench prep`` (same generator:
  seeded photo-like content, JPEG quality 90), median of ``--reps`` calls, including the Python
  call (ours: ``proc(images=path)``; upstream: ``proc(images=load_image(path))``);
- throughput: a batch of ``--batch`` (64) mixed photos (JPEG and PNG, 640x480 to 2048x1536), one
  image per call, from 1 and 2 Python threads sharing one processor, images per second; and the
  whole batch in one call (ours spreads it over the Rust pool).

Upstream's side needs torch and transformers 5.23.0 (the fixture venv); without them only ours
is timed. Needs Pillow to write the inputs. Run on a quiet machine; this is a benchmark, not a
test. ``--json`` prints one JSON object per measurement instead of the table.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import glm5v


def _photo(w: int, h: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [
            127 + 100 * np.sin(x / 97.0) * np.cos(y / 131.0),
            127 + 90 * np.sin((x + y) / 211.0),
            127 + 80 * np.cos(x / 53.0 - y / 71.0),
        ],
        -1,
    ) + rng.normal(0, 12, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def make_inputs(out_dir: str, batch: int) -> Dict[str, Any]:
    """The two bench images (as ``glm5v bench prep`` makes them) and the mixed batch."""
    from PIL import Image

    single = []
    for w, h, name, fmt in [(4000, 3000, "photo_4000x3000.jpg", "JPEG"), (640, 480, "screen_640x480.png", "PNG")]:
        p = os.path.join(out_dir, name)
        Image.fromarray(_photo(w, h, 0)).save(p, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        single.append(p)
    sizes = [(640, 480), (1024, 768), (1280, 720), (1600, 1200), (2048, 1536), (800, 600), (1920, 1080), (720, 960)]
    mixed = []
    for i in range(batch):
        w, h = sizes[i % len(sizes)]
        fmt = "PNG" if i % 4 == 3 else "JPEG"
        p = os.path.join(out_dir, f"mixed_{i:02d}.{'png' if fmt == 'PNG' else 'jpg'}")
        Image.fromarray(_photo(w, h, i + 1)).save(p, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
        mixed.append(p)
    return {"single": single, "mixed": mixed}


def _median_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def _throughput(call: Callable[[str], Any], paths: List[str], threads: int) -> float:
    """Images per second: ``paths`` split over ``threads`` Python threads, one image per call."""
    call(paths[0])  # warm-up
    shares = [paths[i::threads] for i in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def run(share: List[str]) -> None:
        barrier.wait()
        for p in share:
            call(p)

    ts = [threading.Thread(target=run, args=(s,)) for s in shares]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return len(paths) / (time.perf_counter() - t0)


def _upstream() -> Optional[Callable[[str], Any]]:
    try:
        from transformers.image_utils import load_image
        from transformers.models.glm5_next import Glm5NextImageProcessor
    except Exception:
        return None
    proc = Glm5NextImageProcessor()
    return lambda p: proc(images=load_image(p), return_tensors="pt")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glm5v.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10, help="timed calls per image (median; default 10)")
    ap.add_argument("--batch", type=int, default=64, help="images of the throughput batch (default 64)")
    ap.add_argument("--threads", default="1,2", help="Python thread counts for throughput (default 1,2)")
    ap.add_argument("--no-upstream", action="store_true", help="time ours only")
    ap.add_argument(
        "--pool",
        type=int,
        default=None,
        help="size of glm5v's Rust thread pool (RAYON_NUM_THREADS; default: one thread per core). "
        "One call already spreads an image over the pool, so on a many-core machine a second "
        "Python thread adds less than on a 2-core one",
    )
    ap.add_argument("--json", action="store_true", help="JSON lines instead of the table")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if args.pool is not None:
        os.environ["RAYON_NUM_THREADS"] = str(args.pool)  # read when the pool first starts
    ours_proc = glm5v.ImageProcessor()

    def ours(p: str) -> Any:
        return ours_proc(images=p)

    up = None if args.no_upstream else _upstream()
    rows = []
    with tempfile.TemporaryDirectory(prefix="glm5v-bench-") as d:
        inputs = make_inputs(d, args.batch)
        for p in inputs["single"]:
            o = _median_ms(lambda: ours(p), args.reps)
            u = _median_ms(lambda: up(p), args.reps) if up else None
            rows.append({"what": "per_image", "input": os.path.basename(p), "ours_ms": o, "upstream_ms": u,
                         "speedup": (u / o) if u else None})
        mixed = inputs["mixed"]
        o = len(mixed) / (_median_ms(lambda: ours_proc(images=mixed), 1) / 1e3)
        u = None
        if up:
            from transformers.image_utils import load_image
            from transformers.models.glm5_next import Glm5NextImageProcessor

            uproc = Glm5NextImageProcessor()
            u = len(mixed) / (_median_ms(lambda: uproc(images=[load_image(p) for p in mixed], return_tensors="pt"), 1) / 1e3)
        rows.append({"what": "one_call", "images": len(mixed), "ours_per_s": o, "upstream_per_s": u,
                     "speedup": (o / u) if u else None})
        for t in threads:
            o = _throughput(ours, inputs["mixed"], t)
            u = _throughput(up, inputs["mixed"], t) if up else None
            rows.append({"what": "throughput", "threads": t, "images": len(inputs["mixed"]),
                         "ours_per_s": o, "upstream_per_s": u, "speedup": (o / u) if u else None})
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    f = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
    fx = lambda x: "n/a" if x is None else f"{x:.2f}x"  # noqa: E731
    pool = os.environ.get("RAYON_NUM_THREADS", f"{os.cpu_count()} (one per core)")
    print(f"glm5v {glm5v.__version__} (JPEG SIMD: {glm5v.JPEG_SIMD}, Rust pool {pool}), {os.cpu_count()} CPUs, "
          f"upstream: {'Glm5NextImageProcessor' if up else 'not installed / skipped'}")
    print(f"\nper image, median of {args.reps} calls (ms, including the Python call)")
    print(f"  {'input':<24} {'ours':>9} {'upstream':>9} {'speedup':>8}")
    for r in rows:
        if r["what"] == "per_image":
            print(f"  {r['input']:<24} {r['ours_ms']:>9.2f} {f(r['upstream_ms'], '9.2f'):>9} {fx(r['speedup']):>8}")
    print(f"\nthroughput, {args.batch} mixed photos, one image per call, threads sharing one processor (images/s)")
    print(f"  {'threads':<8} {'ours':>9} {'upstream':>9} {'ours/up':>8} {'ours vs 1 thread':>17}")
    base = {}
    for r in rows:
        if r["what"] == "throughput":
            base.setdefault("o", r["ours_per_s"])
            if r["upstream_per_s"] is not None:
                base.setdefault("u", r["upstream_per_s"])
            scale = r["ours_per_s"] / base["o"]
            uscale = (r["upstream_per_s"] / base["u"]) if r["upstream_per_s"] else None
            print(f"  {r['threads']:<8} {r['ours_per_s']:>9.1f} {f(r['upstream_per_s'], '9.1f'):>9} "
                  f"{fx(r['speedup']):>8} {scale:>10.2f}x (upstream {fx(uscale)})")
    for r in rows:
        if r["what"] == "one_call":
            print(f"\nall {r['images']} in one call (ours: in parallel on the Rust pool; upstream: in turn), images/s")
            print(f"  ours {r['ours_per_s']:.1f}, upstream {f(r['upstream_per_s'], '.1f')}, {fx(r['speedup'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
