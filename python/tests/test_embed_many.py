"""Embedder.embed_many (a corpus through the library's batcher, results in input order) and
pickling of Embedder and ImageProcessor. Every embedding is held to ``Embedder.embed`` of that
input alone, bit for bit."""

import os
import pathlib
import pickle
import threading

import numpy as np
import pytest

import glm5v
from conftest import PREP, TOWER

TINY = TOWER / "tiny"

# every tower input, and prep images of many formats and modes, from 16 to 1620 tokens (the
# 8000-token ones take 22 s each through the tiny tower on two cores: left out)
PREP_IMAGES = [
    "bmp_rgb.bmp",
    "custom_640x480.jpg",
    "gif_animated.gif",
    "jpeg_cmyk.jpg",
    "jpeg_exif_6.jpg",
    "jpeg_gray.jpg",
    "png_la.png",
    "png_palette_alpha.png",
    "png_rgb16.png",
    "sliver_1x600.png",
    "tiff_rgb.tiff",
    "tiny_1x1.png",
    "webp_lossy_alpha.webp",
    "exact_336x252.png",
    "panorama_3000x400.jpg",
]


def fixture_paths():
    return sorted(str(p) for p in (TOWER / "inputs").glob("*.png")) + [str(PREP / "images" / n) for n in PREP_IMAGES]


@pytest.fixture(scope="module")
def embedder():
    return glm5v.Embedder(TINY, threads=2)


@pytest.fixture(scope="module")
def alone(embedder):
    """Input (path) -> (grid, embeddings) of embed() on that input alone."""
    out = {}
    for p in fixture_paths():
        r = embedder.embed(p)
        out[p] = (r.spans[0].grid_thw, r.embeddings)
    return out


def assert_same(item, want_grid, want_emb):
    assert item.status == "ok" and item.error is None, item
    assert item.grid_thw == want_grid
    assert item.tokens == want_emb.shape[0]
    assert item.embedding.dtype == np.float32 and item.embedding.shape == want_emb.shape
    assert item.embedding.tobytes() == want_emb.tobytes()


def test_bit_identical_to_each_input_alone(embedder, alone):
    paths = fixture_paths()
    items = list(embedder.embed_many(paths))
    assert [i.index for i in items] == list(range(len(paths)))
    assert [i.input for i in items] == paths
    for item, p in zip(items, paths):
        assert_same(item, *alone[p])
    # the default budget packed inputs of different sizes together: packed rows are the bits
    # of each input alone
    assert len({i.tokens for i in items}) > 5
    assert max(i.batch_items for i in items) >= 5, [i.batch_items for i in items]


@pytest.mark.parametrize("batch_tokens", [20, 57, 300])
def test_order_kept_with_small_budgets(embedder, alone, batch_tokens):
    """Small budgets: one or a few inputs a forward, decoded on 3 threads out of order; the
    results still come in input order. Inputs priced over the budget are error results."""
    paths = fixture_paths()[:16] * 2
    items = list(embedder.embed_many(paths, batch_tokens=batch_tokens, decode_threads=3))
    assert [i.index for i in items] == list(range(len(paths)))
    assert [i.input for i in items] == paths
    for item, p in zip(items, paths):
        grid, emb = alone[p]
        if emb.shape[0] > batch_tokens:
            assert item.status == "error" and item.embedding is None
            assert f"{emb.shape[0]} tokens exceed the batch budget of {batch_tokens}" in item.error
        else:
            assert_same(item, grid, emb)
            assert item.batch_items * 16 <= batch_tokens  # 16 tokens at least per input
    assert any(not i.ok for i in items)  # over-budget inputs: 414 tokens, or less
    if batch_tokens == 300:
        assert max(i.batch_items for i in items if i.ok) > 1


def test_every_input_kind(embedder, alone):
    path = str(TOWER / "inputs" / "scene_112x140.png")
    uri = (PREP / "images" / "datauri_png.txt").read_text().strip()
    data = pathlib.Path(path).read_bytes()
    want_uri = embedder.embed(uri)
    items = list(embedder.embed_many([path, pathlib.Path(path), data, bytearray(data), uri]))
    assert [i.input for i in items] == [path, path, "<bytes #2>", "<bytes #3>", uri]
    for i in items[:4]:
        assert_same(i, *alone[path])
    assert_same(items[4], want_uri.spans[0].grid_thw, want_uri.embeddings)
    r = repr(items[4])
    assert r.startswith("EmbedItem(#4 'data:image/png;base64,") and "..." in r and ": ok, grid_thw=" in r


def test_bad_inputs_are_error_results_in_place(embedder, alone, tmp_path):
    good = str(TOWER / "inputs" / "scene_112x140.png")
    png = pathlib.Path(good).read_bytes()
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(png[: len(png) // 3])  # a readable header, then no pixels
    inputs = [
        good,
        str(tmp_path / "missing.jpg"),
        str(empty),
        b"",
        b"not an image",
        42,
        np.zeros((4, 4, 3), np.uint8),
        str(truncated),
        "data:image/png;base64,!!!",
        good,
    ]
    items = list(embedder.embed_many(inputs, batch_tokens=64))
    assert [i.index for i in items] == list(range(len(inputs)))
    assert [i.status for i in items] == ["ok"] + ["error"] * 8 + ["ok"]
    assert_same(items[0], *alone[good])
    assert_same(items[-1], *alone[good])
    for i in items[1:-1]:
        assert i.error and i.embedding is None and i.grid_thw is None and i.tokens is None
        assert repr(i).startswith(f"EmbedItem(#{i.index} ") and ": error: " in repr(i)
    missing, empty_f, empty_b, garbage, number, array, trunc, uri = items[1:-1]
    assert "missing.jpg" in missing.error
    assert str(empty) in empty_f.error and "empty" in empty_f.error.lower()
    assert empty_b.input == "<bytes #3>" and "<bytes #3>" in empty_b.error
    assert garbage.input == "<bytes #4>" and "<bytes #4>" in garbage.error
    assert number.input == "<int #5>" and "embed_many takes paths, bytes or data URIs" in number.error
    assert array.input == "<ndarray #6>" and "Embedder.embed" in array.error
    assert str(truncated) in trunc.error
    assert uri.input == "data:image/png;base64,!!!" and "data URI" in uri.error
    # the same messages the exceptions of embed() carry
    with pytest.raises(glm5v.DecodeError) as e:
        embedder.embed(b"not an image")
    assert str(e.value) == garbage.error.replace("<bytes #4>", "<bytes #0>")


def test_bounded_and_lazy(embedder, alone):
    """A generator of 300 inputs is pulled as the window has room, not up front: after each
    result at most max_in_flight inputs (plus the few results queued for the consumer) have
    been pulled beyond it. The stream's worker pulls them with the GIL while the consumer
    waits for results without it (a GIL held while waiting would deadlock here)."""
    path = str(TOWER / "inputs" / "scene_112x140.png")
    grid, want = alone[path]
    pulled = []

    def gen():
        for i in range(300):
            pulled.append(i)
            yield path

    stream = embedder.embed_many(gen(), batch_tokens=64, max_in_flight=8)
    ahead = []
    n = 0
    for item in stream:
        n += 1
        ahead.append(len(pulled) - n)
        assert item.index == n - 1
        assert_same(item, grid, want)
    assert n == 300 and len(pulled) == 300
    # window (8) + results queued for the consumer (4) + one being handed over
    assert max(ahead) <= 8 + 4 + 1, max(ahead)
    assert max(ahead) >= 2  # it did work ahead of the consumer

    # the token window too: 20-token inputs and a budget of 40 hold at most 4 * 40 tokens
    pulled.clear()
    stream = embedder.embed_many(gen(), batch_tokens=40, max_in_flight=256)
    first = next(stream)
    assert_same(first, grid, want)
    assert len(pulled) <= 160 // 20 + 4 + 2, len(pulled)
    stream.close()


def test_close_and_abandon_stop_pulling(embedder):
    path = str(TOWER / "inputs" / "scene_112x140.png")
    pulled = []

    def gen():
        for i in range(10_000):
            pulled.append(i)
            yield path

    with embedder.embed_many(gen(), batch_tokens=64, max_in_flight=8) as stream:
        next(stream)
    seen = len(pulled)
    assert seen < 40
    with pytest.raises(StopIteration):
        next(stream)
    for _ in range(20):  # the worker has stopped pulling
        threading.Event().wait(0.05)
    assert len(pulled) <= seen + 1


def test_an_exception_of_the_inputs_is_raised_after_the_results_before_it(embedder, alone):
    path = str(TOWER / "inputs" / "scene_112x140.png")

    def gen():
        yield path
        yield path
        raise RuntimeError("the listing failed")

    stream = embedder.embed_many(gen())
    assert_same(next(stream), *alone[path])
    assert_same(next(stream), *alone[path])
    with pytest.raises(RuntimeError, match="the listing failed"):
        next(stream)
    with pytest.raises(StopIteration):
        next(stream)


def test_empty_and_option_errors(embedder):
    assert list(embedder.embed_many([])) == []
    assert list(embedder.embed_many(iter(()))) == []
    with pytest.raises(glm5v.OptionsError, match="batch_tokens"):
        embedder.embed_many(["a.png"], batch_tokens=0)
    with pytest.raises(glm5v.OptionsError, match="decode_threads"):
        embedder.embed_many(["a.png"], decode_threads=0)
    with pytest.raises(TypeError):
        embedder.embed_many(42)


def test_other_precisions_and_the_shared_pool(alone):
    """A bf16 embedder and one on the shared pool (threads=None) match their own embed()."""
    for kw in ({"precision": "bf16"}, {"precision": "f64"}, {}):
        e = glm5v.Embedder(TINY, **kw)
        paths = fixture_paths()[:8]
        for item, p in zip(e.embed_many(paths, batch_tokens=100), paths):
            r = e.embed(p)
            assert_same(item, r.spans[0].grid_thw, r.embeddings)


def test_threads_share_one_embedder(embedder, alone):
    paths = fixture_paths()[:10]
    out = {}

    def run(k):
        out[k] = [i.embedding.tobytes() for i in embedder.embed_many(paths, batch_tokens=80)]

    ts = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    want = [alone[p][1].tobytes() for p in paths]
    assert out == {0: want, 1: want, 2: want}


# ---- pickling -------------------------------------------------------------------------------


def test_embedder_pickles_with_its_options(tmp_path):
    e = glm5v.Embedder(TINY, precision="f64", threads=2, max_image_tokens=24, alpha="white")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is glm5v.Embedder and e2 is not e
    assert (e2.precision, e2.backend, e2.out_hidden_size, e2.depth) == ("f64", "cpu", 96, 2)
    assert e2.model_dir == os.path.abspath(TINY)
    big = str(PREP / "images" / "custom_640x480.jpg")
    alpha = str(PREP / "images" / "png_rgba.png")
    for p in (big, alpha):
        a, b = e.embed(p), e2.embed(p)
        assert a.embeddings.tobytes() == b.embeddings.tobytes()
        assert a.spans == b.spans
    # the options came along: the token budget and the alpha rule differ from the defaults
    assert e2.embed(big).spans[0].token_count <= 24 < glm5v.Embedder(TINY).embed(big).spans[0].token_count
    default = glm5v.Embedder(TINY, precision="f64", threads=2, max_image_tokens=24)
    assert default.embed(alpha).embeddings.tobytes() != e2.embed(alpha).embeddings.tobytes()
    # and a copy of the copy, and embed_many on it
    e3 = pickle.loads(pickle.dumps(e2))
    [item] = list(e3.embed_many([big]))
    assert item.embedding.tobytes() == e.embed(big).embeddings.tobytes()


def test_embedder_pickle_reopens_from_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(TOWER)
    e = glm5v.Embedder("tiny")
    blob = pickle.dumps(e)
    monkeypatch.chdir(tmp_path)  # the relative path no longer resolves
    e2 = pickle.loads(blob)
    p = str(TOWER / "inputs" / "scene_112x140.png")
    assert e2.embed(p).embeddings.tobytes() == e.embed(p).embeddings.tobytes()


def test_processors_pickle_with_their_options(tmp_path):
    img = str(PREP / "images" / "custom_640x480.jpg")
    for proc in (
        glm5v.ImageProcessor(),
        glm5v.ImageProcessor(max_image_tokens=40, alpha="white", image_mean=0.5),
        glm5v.ImageProcessor.from_pretrained(TINY, min_image_tokens=20),
    ):
        p2 = pickle.loads(pickle.dumps(proc))
        assert type(p2) is glm5v.ImageProcessor and p2.to_dict() == proc.to_dict()
        a, b = proc(images=img), p2(images=img)
        assert a["pixel_values"].tobytes() == b["pixel_values"].tobytes()
        assert a["image_grid_thw"].tolist() == b["image_grid_thw"].tolist()
    assert p2.min_image_tokens == 20
    v = glm5v.VideoProcessor(fps=1)
    v2 = pickle.loads(pickle.dumps(v))
    assert type(v2) is glm5v.VideoProcessor and v2.to_dict() == v.to_dict() and v2.fps == 1
