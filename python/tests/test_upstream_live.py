"""Live comparison with upstream, where torch and transformers 5.23.0 are installed (the
fixture venv; skipped elsewhere): PIL images of every mode, arrays of every layout upstream
reads, files, a clip; and taps recorded from upstream's Glm5NextVisionModel by
``glm5v.taps.record`` against glm5v's own forward."""

import importlib.util
import json
import warnings

import numpy as np
import pytest

import glm5v
from conftest import PREP, REPO, TOWER

pytest.importorskip("torch")
glm5_next = pytest.importorskip("transformers.models.glm5_next")
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.image_utils import load_image  # noqa: E402

warnings.filterwarnings("ignore")
UP = glm5_next.Glm5NextImageProcessor()
OURS = glm5v.ImageProcessor()


def same(images, ours=OURS, up=UP, **kwargs):
    want = up(images=images, return_tensors="pt", **kwargs)
    got = ours(images=images, **kwargs)
    np.testing.assert_array_equal(got["image_grid_thw"], want["image_grid_thw"].numpy())
    assert got["pixel_values"].tobytes() == want["pixel_values"].numpy().tobytes()


def noise(h, w, c, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


MODES = ["RGB", "RGBA", "LA", "L", "P", "PA", "1", "I;16", "I", "F", "CMYK", "YCbCr", "HSV", "LAB", "RGBX", "La", "RGBa"]


@pytest.mark.parametrize("mode", MODES)
def test_pil_modes(mode):
    base = Image.fromarray(noise(37, 53, 4, 1), "RGBA")
    img = base.convert(mode) if mode not in ("I;16",) else base.convert("L").convert("I;16")
    try:
        UP(images=img, return_tensors="pt")
    except Exception as e:  # upstream refuses it: so must we
        with pytest.raises(Exception):
            OURS(images=img)
        pytest.skip(f"upstream refuses mode {mode}: {e}")
    same(img)


def test_pil_transparency_keys():
    p = Image.fromarray(noise(30, 40, 3, 2)).convert("P", palette=Image.ADAPTIVE, colors=16)
    p.info["transparency"] = 3
    same(p)
    rgb = Image.fromarray(noise(30, 40, 3, 3) // 64 * 64)
    rgb.info["transparency"] = (64, 0, 128)
    same(rgb)
    gray = Image.fromarray(noise(30, 40, 1, 4)[:, :, 0] // 32 * 32, "L")
    gray.info["transparency"] = 64
    same(gray)


@pytest.mark.parametrize(
    "shape", [(37, 53, 3), (3, 37, 53), (1, 37, 53), (37, 53, 1), (1, 600, 3), (3, 5, 3), (600, 1, 3), (2000, 30, 3)]
)
def test_array_layouts(shape):
    a = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    same(a)


def test_a_4d_array_is_a_batch():
    same(np.stack([noise(40, 50, 3, i) for i in range(3)]))


def test_files_and_options():
    names = ["png_rgb.png", "jpeg_cmyk.jpg", "png_gray16.png", "gif_transparent.gif", "jpeg_exif_6.jpg"]
    images = [load_image(str(PREP / "images" / n)) for n in names]
    same(images)
    for kw in ({"max_image_tokens": 64, "min_image_tokens": 4}, {"patch_size": 16, "merge_size": 1}):
        same(images, ours=glm5v.ImageProcessor(**kw), up=glm5_next.Glm5NextImageProcessor(**kw))


def test_video_frames():
    from transformers.video_utils import VideoMetadata

    frames = np.stack([noise(50, 70, 3, i) for i in range(7)])
    up = glm5_next.Glm5NextVideoProcessor()(
        videos=[frames], video_metadata=[VideoMetadata(total_num_frames=7, fps=3.0, width=70, height=50)],
        return_tensors="pt",
    )
    got = glm5v.VideoProcessor()(videos=[frames], clip_fps=3.0)
    np.testing.assert_array_equal(got["video_grid_thw"], up["video_grid_thw"].numpy())
    assert got["pixel_values_videos"].tobytes() == up["pixel_values_videos"].numpy().tobytes()


def _dump_taps_module():
    spec = importlib.util.spec_from_file_location("dump_taps", REPO / "fixtures" / "upstream" / "dump_taps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_record_upstream_tower_against_ours():
    from glm5v.testing import assert_taps_close

    dump_taps = _dump_taps_module()
    model = dump_taps.build_model(TOWER / "tiny", torch.float32)
    dump_taps.set_attn(model, "eager")  # as the committed dump was made
    image = str(TOWER / "inputs" / "scene_112x140.png")
    out = glm5v.ImageProcessor()(images=image, return_tensors="pt")
    with glm5v.taps.record(model) as rec, torch.no_grad():
        model(hidden_states=out["pixel_values"], grid_thw=out["image_grid_thw"])
    rec.add_inputs(out["pixel_values"], out["image_grid_thw"])
    assert set(glm5v.taps.tap_names(2)) <= set(rec.taps)
    # upstream recorded live == upstream's committed dump (the same hooks' values, bit for bit)
    report = assert_taps_close(rec, TOWER / "tiny" / "taps.safetensors", tolerance=0.0)
    assert report.passed
    ours = glm5v.Embedder(TOWER / "tiny").embed(image, taps=True)
    assert_taps_close(ours.taps, rec, names=glm5v.taps.tap_names(2))
