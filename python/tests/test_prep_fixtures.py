"""Every prep fixture (fixtures/prep/expected, what upstream's processors returned) reproduced
byte for byte through the Python API, from paths / data URIs, bytes, numpy arrays and PIL
images, one at a time and mixed in one call."""

import json

import numpy as np
import pytest

import glm5v
from conftest import (
    PREP,
    f32_sha,
    image_cases,
    pil_load_image,
    read_safetensors,
    source_bytes,
    source_text,
    u8_sha,
    video_cases,
)

IMAGE_CASES = image_cases()
VIDEO_CASES = video_cases()


def load_case(name):
    tensors, meta = read_safetensors(PREP / "expected" / f"{name}.safetensors")
    return tensors, meta


def processor_for(meta):
    kwargs = json.loads(meta.get("processor_kwargs", "{}") or "{}")
    return glm5v.ImageProcessor(alpha=meta.get("alpha", "drop"), **kwargs)


def check_output(out, tensors, meta):
    pv, grid = out["pixel_values"], out["image_grid_thw"]
    assert pv.dtype == np.float32 and grid.dtype == np.int64
    assert pv.ndim == 2 and grid.shape == (len(json.loads(meta["source"])), 3)
    np.testing.assert_array_equal(grid, tensors["image_grid_thw"])
    assert list(pv.shape) == json.loads(meta["pixel_values_shape"])
    if "pixel_values" in tensors:
        assert pv.tobytes() == np.ascontiguousarray(tensors["pixel_values"], dtype="<f4").tobytes()
    assert f32_sha(pv) == meta["pixel_values_sha256"]


def test_every_fixture_is_covered():
    # 50+ image cases and both videos; a missing fixtures folder must not pass quietly
    assert len(IMAGE_CASES) >= 50, IMAGE_CASES
    assert len(VIDEO_CASES) == 2, VIDEO_CASES


@pytest.mark.parametrize("name", IMAGE_CASES)
def test_from_paths(name):
    tensors, meta = load_case(name)
    srcs = [source_text(meta, s) for s in json.loads(meta["source"])]
    out = processor_for(meta)(images=srcs if len(srcs) > 1 else srcs[0], return_tensors="np")
    check_output(out, tensors, meta)


@pytest.mark.parametrize("name", IMAGE_CASES)
def test_from_bytes(name):
    tensors, meta = load_case(name)
    srcs = [source_bytes(meta, s) for s in json.loads(meta["source"])]
    out = processor_for(meta)(images=srcs)
    check_output(out, tensors, meta)


def decoded_arrays(tensors, meta):
    """What upstream's processor got as pixels (load_image's RGB, or convert_to_rgb's result for
    alpha "white"), from the fixture where stored, else decoded here by PIL and checked against
    the recorded sha256."""
    srcs = json.loads(meta["source"])
    shas = json.loads(meta["decoded_sha256"]) if meta["decoded_sha256"].startswith("[") else [meta["decoded_sha256"]]
    out = []
    for i, s in enumerate(srcs):
        key = "decoded" if len(srcs) == 1 else f"decoded.{i}"
        if key in tensors:
            arr = np.array(tensors[key])
        else:
            if meta.get("alpha") == "white":
                pytest.skip("large alpha-white case without a stored decoded image")
            pytest.importorskip("PIL")
            arr = np.asarray(pil_load_image(source_bytes(meta, s)))
        assert u8_sha(arr) == shas[i], f"{key}: the decoded image differs from upstream's"
        out.append(arr)
    return out


@pytest.mark.parametrize("name", IMAGE_CASES)
def test_from_arrays(name):
    tensors, meta = load_case(name)
    keys = json.loads(meta.get("transparency_keys", "null") or "null") or []
    if meta.get("alpha", "drop") == "drop" and any(k is not None for k in keys):
        pytest.skip("a colour key rides on the PIL image, not on its pixels (covered by test_from_pil)")
    arrays = decoded_arrays(tensors, meta)
    if any(a.shape[0] in (1, 3, 4) for a in arrays):
        pytest.skip("upstream reads an array whose first axis is 1, 3 or 4 long as channels-first")
    out = processor_for(meta)(images=arrays)
    check_output(out, tensors, meta)


@pytest.mark.parametrize("name", IMAGE_CASES)
def test_from_pil(name):
    pytest.importorskip("PIL")
    import io

    from PIL import Image

    tensors, meta = load_case(name)
    images = []
    for s in json.loads(meta["source"]):
        data = source_bytes(meta, s)
        if meta.get("alpha", "drop") == "drop":
            images.append(pil_load_image(data))  # processor(images=load_image(source))
        else:
            images.append(Image.open(io.BytesIO(data)))  # processor(images=Image.open(source))
    out = processor_for(meta)(images=images)
    check_output(out, tensors, meta)


def test_mixed_kinds_in_one_call():
    """Default-option single-image cases, each given as another kind, in one call: the rows come
    back in call order and each image's slice is upstream's."""
    pytest.importorskip("PIL")
    names = []
    for n in IMAGE_CASES:
        _, meta = load_case(n)
        if (
            meta["kind"] == "image"
            and meta.get("alpha", "drop") == "drop"
            and meta.get("processor_kwargs", "{}") in ("{}", "")
            and not meta["pixel_values_shape"].startswith("[0")
        ):
            names.append(n)
    names = [n for n in names if not n.startswith(("large_", "panorama_"))][:16]
    assert len(names) >= 10
    images, want = [], []
    for i, n in enumerate(names):
        tensors, meta = load_case(n)
        (s,) = json.loads(meta["source"])
        kind = i % 4
        if kind == 0:
            images.append(source_text(meta, s))
        elif kind == 1:
            images.append(source_bytes(meta, s))
        elif kind == 2:
            images.append(pil_load_image(source_bytes(meta, s)))
        else:
            images.append(np.asarray(pil_load_image(source_bytes(meta, s))).copy())
        want.append((tensors["image_grid_thw"], meta["pixel_values_sha256"]))
    out = glm5v.ImageProcessor()(images=images)
    pv, grid = out["pixel_values"], out["image_grid_thw"]
    at = 0
    for i, (g, sha) in enumerate(want):
        np.testing.assert_array_equal(grid[i : i + 1], g)
        rows = int(np.prod(g))
        assert f32_sha(pv[at : at + rows]) == sha, names[i]
        at += rows
    assert at == pv.shape[0]


@pytest.mark.parametrize("name", IMAGE_CASES)
def test_plan_matches_grid(name):
    tensors, meta = load_case(name)
    srcs = [source_text(meta, s) for s in json.loads(meta["source"])]
    plans = processor_for(meta).plan(srcs)
    grid = tensors["image_grid_thw"]
    assert [p["grid_thw"] for p in plans] == grid.tolist()
    assert [p["tokens"] for p in plans] == [int(np.prod(g)) // 4 for g in grid]
    assert [p["patches"] for p in plans] == [int(np.prod(g)) for g in grid]


@pytest.mark.parametrize("name", [n for n in IMAGE_CASES if "prompt" in load_case(n)[1]])
def test_prompt_expansion(name):
    tensors, meta = load_case(name)
    proc = processor_for(meta)
    grid = tensors["image_grid_thw"]
    assert proc.expand_prompt(meta["prompt_in"], grid) == meta["prompt"]
    if "input_ids" in tensors:
        ids = [i for g in grid for i in proc.image_prompt_ids(g)]
        assert ids == tensors["input_ids"].reshape(-1).tolist()
        assert "".join(proc.image_prompt(g) for g in grid) == meta["prompt"]


@pytest.mark.parametrize("name", VIDEO_CASES)
@pytest.mark.parametrize("kind", ["paths", "arrays"])
def test_video(name, kind):
    tensors, meta = load_case(name)
    fps = float(meta["fps"])
    srcs = json.loads(meta["source"])
    if kind == "paths":
        frames = [str(PREP / s) for s in srcs]
    else:
        pytest.importorskip("PIL")
        frames = np.stack([np.asarray(pil_load_image((PREP / s).read_bytes())) for s in srcs])
    vp = glm5v.VideoProcessor()
    if kind == "paths":
        out = vp(videos=[frames], clip_fps=fps)
    else:  # upstream's way of saying the rate
        out = vp(videos=[frames], video_metadata=[{"fps": fps}])
    np.testing.assert_array_equal(out["video_grid_thw"], tensors["video_grid_thw"])
    pv = out["pixel_values_videos"]
    assert pv.dtype == np.float32
    if "pixel_values_videos" in tensors:
        assert pv.tobytes() == tensors["pixel_values_videos"].astype("<f4").tobytes()
    assert f32_sha(pv) == meta["pixel_values_videos_sha256"]
    assert out["frame_indices"] == [tensors["frame_indices"].tolist()]
    assert out["timestamps"] == [tensors["timestamps"].tolist()]
    if "prompt" in meta:
        assert vp.expand_prompt(meta["prompt_in"], out["video_grid_thw"], out["timestamps"]) == meta["prompt"]


def test_return_tensors_pt():
    torch = pytest.importorskip("torch")
    tensors, meta = load_case("exact_112x112")
    (s,) = json.loads(meta["source"])
    out = glm5v.ImageProcessor()(images=str(PREP / s), return_tensors="pt")
    assert out["pixel_values"].dtype == torch.float32
    assert out["image_grid_thw"].dtype == torch.int64
    assert out.pixel_values.numpy().tobytes() == tensors["pixel_values"].astype("<f4").tobytes()
