"""The processor releases the GIL while it works, and one processor is safe to share."""

import threading
import time

import numpy as np

import glm5v
from conftest import PREP, f32_sha

BIG = PREP / "images" / "large_3264x2448.jpg"


def _work(proc, n):
    return proc(images=[str(BIG)] * n)


def test_two_threads_overlap_inside_their_calls():
    """Each thread records when its call starts and ends. With the GIL held for the whole call
    the two intervals could not overlap (the second call cannot start until the first returns);
    released, they overlap for most of their length whatever the machine's load."""
    proc = glm5v.ImageProcessor()
    _work(proc, 1)  # warm up (pools, page cache)
    t0 = time.perf_counter()
    _work(proc, 2)
    alone = time.perf_counter() - t0
    n = max(2, int(np.ceil(0.4 / max(alone / 2, 1e-3))))  # calls of ~0.4 s or more
    barrier = threading.Barrier(2)
    spans = [None, None]
    outs = [None, None]

    def run(i):
        barrier.wait()
        s = time.perf_counter()
        outs[i] = _work(proc, n)
        spans[i] = (s, time.perf_counter())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (s0, e0), (s1, e1) = spans
    overlap = min(e0, e1) - max(s0, s1)
    shorter = min(e0 - s0, e1 - s1)
    assert overlap > 0.5 * shorter, f"calls overlapped {overlap:.3f} s of {shorter:.3f} s"
    assert f32_sha(outs[0]["pixel_values"]) == f32_sha(outs[1]["pixel_values"])


def test_python_thread_runs_during_a_call():
    """A pure-Python thread keeps running while another thread is inside a long call: its
    longest stall during the call is far shorter than the call."""
    proc = glm5v.ImageProcessor()
    _work(proc, 1)
    done = threading.Event()
    call = {}

    def worker():
        call["start"] = time.perf_counter()
        _work(proc, 6)
        call["end"] = time.perf_counter()
        done.set()

    ticks = []
    t = threading.Thread(target=worker)
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    t.join()
    inside = [x for x in ticks if call["start"] <= x <= call["end"]]
    duration = call["end"] - call["start"]
    gaps = np.diff(inside) if len(inside) > 1 else np.array([duration])
    assert len(inside) >= 5, f"{len(inside)} ticks during a {duration:.3f} s call"
    assert gaps.max() < 0.5 * duration, f"longest stall {gaps.max():.3f} s of a {duration:.3f} s call"


def test_shared_processor_from_many_threads():
    proc = glm5v.ImageProcessor()
    files = sorted((PREP / "images").glob("png_*.png"))[:6] + sorted((PREP / "images").glob("jpeg_*.jpg"))[:6]
    want = {str(f): f32_sha(proc(images=str(f))["pixel_values"]) for f in files}
    errors = []

    def run(k):
        for f in files[k % 3 :: 2]:
            got = f32_sha(proc(images=str(f))["pixel_values"])
            if got != want[str(f)]:
                errors.append(str(f))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_embedder_releases_the_gil():
    """Two threads' forwards on one shared embedder overlap in time (a 64x64-patch batch of the
    tiny checkpoint runs ~0.1-0.6 s), and give the same embeddings."""
    from conftest import TOWER

    emb = glm5v.Embedder(TOWER / "tiny")
    pv = np.random.default_rng(0).standard_normal((64 * 64, 1176)).astype(np.float32)
    want = emb.embed_pixels(pv, [[1, 64, 64]]).embeddings
    barrier = threading.Barrier(2)
    spans, outs = [None, None], [None, None]

    def run(i):
        barrier.wait()
        s = time.perf_counter()
        outs[i] = emb.embed_pixels(pv, [[1, 64, 64]]).embeddings
        spans[i] = (s, time.perf_counter())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (s0, e0), (s1, e1) = spans
    overlap = min(e0, e1) - max(s0, s1)
    assert overlap > 0.5 * min(e0 - s0, e1 - s1), f"forwards overlapped {overlap:.3f} s"
    assert outs[0].tobytes() == want.tobytes() == outs[1].tobytes()
