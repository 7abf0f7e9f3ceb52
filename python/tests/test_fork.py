"""After fork() (multiprocessing's fork start method, as serving engines run processor workers)
a child can use a processor and an embedder made by its parent: the calls run in a pool that
the child rebuilds, not in the parent's threads (which the child does not have)."""

import multiprocessing as mp
import sys

import numpy as np
import pytest

import glm5v
from conftest import PREP, TOWER, f32_sha

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
BIG = str(PREP / "images" / "large_3264x2448.jpg")
PNG = str(PREP / "images" / "png_rgb.png")
TINY_IMAGE = str(TOWER / "inputs" / "scene_112x140.png")

PROC = glm5v.ImageProcessor()
EMB = glm5v.Embedder(TOWER / "tiny")


def child(q):
    out = PROC(images=[BIG, PNG])
    emb = EMB.embed(TINY_IMAGE).embeddings
    q.put((f32_sha(out["pixel_values"]), emb.tobytes()))


def test_a_forked_child_can_process_and_embed():
    # the parent's pool has run (its threads exist in the parent only)
    want = f32_sha(PROC(images=[BIG, PNG])["pixel_values"])
    want_emb = EMB.embed(TINY_IMAGE).embeddings.tobytes()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung inside glm5v")
    assert p.exitcode == 0
    got, got_emb = q.get(timeout=10)
    assert got == want and got_emb == want_emb
    assert np.frombuffer(got_emb, np.float32).size == 20 * 96
