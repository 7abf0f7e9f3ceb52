"""RGBA and LA PIL images are composited over white in Rust (no PIL call, no GIL): the result
must be PIL's own ``alpha_composite`` + ``convert("RGB")`` for every (colour, alpha) pair."""

import numpy as np
import pytest

import glm5v

Image = pytest.importorskip("PIL.Image")


def pil_way(img):
    rgba = img.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(white, rgba).convert("RGB"))


def every_pair(bands):
    # 256 x 256 pixels: row = alpha, column = colour value (each channel shifted a little)
    a, c = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    if bands == 4:
        px = np.stack([c, (c + 85) % 256, (c + 170) % 256, a], -1)
    else:
        px = np.stack([c, a], -1)
    return px.astype(np.uint8)


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_every_colour_and_alpha(mode):
    img = Image.fromarray(every_pair(len(mode)), mode)
    want = pil_way(img)
    got = glm5v.ImageProcessor(patch_size=1, merge_size=1, temporal_patch_size=1, do_normalize=False,
                               rescale_factor=1.0, min_image_tokens=1, max_image_tokens=10**6)(images=img)
    # patch 1, merge 1, no normalisation: pixel_values are the canvas's values in raster order
    assert got["image_grid_thw"].tolist() == [[1, 256, 256]]
    pv = got["pixel_values"].reshape(256, 256, 3)
    assert pv.astype(np.uint8).tobytes() == want.tobytes()


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_fast_path_equals_pil_path(mode):
    rng = np.random.default_rng(7)
    img = Image.fromarray(rng.integers(0, 256, (61, 83, len(mode)), dtype=np.uint8), mode)
    proc = glm5v.ImageProcessor()
    fast = proc(images=img)["pixel_values"]
    slow = proc(images=pil_way(img))["pixel_values"]
    assert fast.tobytes() == slow.tobytes()
