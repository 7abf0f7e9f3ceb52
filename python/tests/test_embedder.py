"""The embedder against upstream's taps of the tiny fixture checkpoint (fixtures/tower): the
same comparison the Rust fixture tests make (every tap within the f32-vs-upstream preset,
scaled by the dump's self_disagreement), through the Python API."""

import json

import numpy as np
import pytest

import glm5v
from conftest import TOWER, read_safetensors

TINY = TOWER / "tiny"
PACKED = TOWER / "packed"


def inputs_of(fixture):
    meta = json.loads((fixture / "fixture.json").read_text())
    return [str(TOWER / p) for p in meta["inputs"]]


@pytest.fixture(scope="module")
def embedder():
    return glm5v.Embedder(TINY, threads=2)


@pytest.fixture(scope="module")
def tiny_dump():
    return read_safetensors(TINY / "taps.safetensors")


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_embeddings_match_upstream(embedder, tiny_dump):
    tensors, meta = tiny_dump
    r = embedder.embed(inputs_of(TINY))
    want = tensors["merger"]
    assert r.embeddings.dtype == np.float32 and r.embeddings.shape == want.shape == (20, 96)
    bound = max(1e-5, 3 * float(meta["self_disagreement"]))
    assert rel_l2(r.embeddings, want) <= bound
    np.testing.assert_array_equal(r.image_grid_thw, tensors["image_grid_thw"])
    [span] = r.spans
    assert (span.grid_thw, span.token_offset, span.token_count) == ((1, 8, 10), 0, 20)
    assert span.prompt == glm5v.ImageProcessor().image_prompt(span.grid_thw)
    assert span.prompt.count(glm5v.IMAGE_TOKEN) == 20


def test_every_tap_within_tolerance(embedder):
    r = embedder.embed(inputs_of(TINY), taps=True)
    report = glm5v.diff(r.taps, TINY / "taps.safetensors")
    assert report.passed, str(report)
    assert len(report) == len(glm5v._glm5v.tap_names(2)) + 1 == 31  # + pixel_values
    assert report["pixel_values"].max_abs == 0.0  # the processor's input, upstream's bytes
    assert report.first_divergence is None and not report.only_in_a and not report.only_in_b
    assert report["merger"].rel_l2 < 1e-5


def test_saved_taps_are_a_dump(embedder, tmp_path):
    r = embedder.embed(inputs_of(TINY), taps=True)
    r.save_taps(tmp_path / "ours.safetensors")
    tensors, meta = read_safetensors(tmp_path / "ours.safetensors")
    assert meta == {"producer": "glm5v (python)", "precision": "f32"}
    np.testing.assert_array_equal(tensors["image_grid_thw"], [[1, 8, 10]])
    assert glm5v.diff(tmp_path / "ours.safetensors", TINY / "taps.safetensors").passed


def test_f64_is_the_tighter_oracle(tiny_dump):
    tensors, meta = tiny_dump
    e64 = glm5v.Embedder(TINY, precision="f64")
    assert e64.precision == "f64"
    r = e64.embed(inputs_of(TINY))
    assert r.embeddings.dtype == np.float32
    assert rel_l2(r.embeddings, tensors["merger"]) <= max(1e-5, 3 * float(meta["self_disagreement"]))


def test_bf16_within_the_gpu_bf16_preset():
    """The CPU's bf16 mode (the GPU's policy) against upstream's f32 taps, judged by the preset
    made for bf16 (rel L2 <= 2e-2, cosine >= 0.999)."""
    e = glm5v.Embedder(TINY, precision="bf16")
    assert e.precision == "bf16"
    r = e.embed(inputs_of(TINY), taps=True)
    report = glm5v.diff(r.taps, TINY / "taps.safetensors", tolerance="gpu-bf16")
    assert report.passed, str(report)
    assert not glm5v.diff(r.taps, TINY / "taps.safetensors").passed  # bf16 is not f32


def test_every_input_kind_gives_the_same_embeddings(embedder, tiny_dump):
    pytest.importorskip("PIL")
    from PIL import Image

    (path,) = inputs_of(TINY)
    base = embedder.embed(path).embeddings
    data = open(path, "rb").read()
    arr = np.asarray(Image.open(path).convert("RGB"))
    for x in (data, arr, Image.open(path).convert("RGB")):
        assert embedder.embed(x).embeddings.tobytes() == base.tobytes()
    # the dump's own pixel_values (upstream's processor output) give the same rows too
    tensors, _ = tiny_dump
    r = embedder.embed_pixels(tensors["pixel_values"], tensors["image_grid_thw"])
    assert r.embeddings.tobytes() == base.tobytes()


def test_packed_batch_of_images_and_a_video(embedder):
    """fixtures/tower/packed: three images and a 4-frame video packed in one batch."""
    tensors, _ = read_safetensors(PACKED / "taps.safetensors")
    grids = tensors["image_grid_thw"]
    r = embedder.embed_pixels(tensors["pixel_values"], grids, taps=True)
    report = glm5v.diff(r.taps, PACKED / "taps.safetensors")
    assert report.passed, str(report)
    counts = [int(np.prod(g)) // 4 for g in grids]
    assert [s.token_count for s in r.spans] == counts
    assert [s.token_offset for s in r.spans] == list(np.cumsum([0] + counts[:-1]))
    assert r.spans[3].prompt.count(glm5v.BEGIN_OF_IMAGE) == grids[3][0]  # one block per frame pair
    # our image processor gives upstream's rows for the three images
    images = inputs_of(PACKED)[:3]
    out = glm5v.ImageProcessor()(images=images)
    n = out["pixel_values"].shape[0]
    assert out["pixel_values"].tobytes() == tensors["pixel_values"][:n].tobytes()
    assert [s.rows for s in embedder.embed(images).spans] == [s.rows for s in r.spans[:3]]


def test_torch_output():
    torch = pytest.importorskip("torch")
    r = glm5v.Embedder(TINY).embed(inputs_of(TINY), return_tensors="pt")
    assert isinstance(r.embeddings, torch.Tensor) and r.embeddings.dtype == torch.float32


def test_embedder_errors(tmp_path, embedder):
    with pytest.raises(glm5v.ModelError, match="config"):
        glm5v.Embedder(tmp_path)
    with pytest.raises(glm5v.OptionsError, match="precision \"f16\""):
        glm5v.Embedder(TINY, precision="f16")
    with pytest.raises(glm5v.OptionsError, match="backend"):
        glm5v.Embedder(TINY, backend="tpu")
    with pytest.raises(glm5v.InputError, match="columns"):
        embedder.embed_pixels(np.zeros((4, 100), np.float32), [[1, 2, 2]])
    with pytest.raises(glm5v.InputError, match="rows"):
        embedder.embed_pixels(np.zeros((8, 1176), np.float32), [[1, 2, 2]])
    with pytest.raises(glm5v.DecodeError, match="<bytes #0>"):
        embedder.embed(b"not an image")


def test_gpu_backend_is_explicit_about_what_it_lacks():
    if not glm5v.Embedder.has_gpu():
        with pytest.raises(glm5v.OptionsError, match="not in this build"):
            glm5v.Embedder(TINY, backend="gpu")
        return
    try:  # a build with the gpu feature: runs where CUDA is, else says why
        e = glm5v.Embedder(TINY, backend="gpu", precision="f32")
    except glm5v.ModelError as ex:
        assert "CUDA" in str(ex) or "cuda" in str(ex)
        return
    r = e.embed(inputs_of(TINY), taps=True)
    assert glm5v.diff(r.taps, TINY / "taps.safetensors", tolerance="gpu-f32").passed
