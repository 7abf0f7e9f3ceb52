"""Bad inputs and options raise glm5v's exceptions, carrying the Rust error's message that
names the input."""

import numpy as np
import pytest

import glm5v
from conftest import PREP

PNG = PREP / "images" / "png_rgb.png"


@pytest.fixture(scope="module")
def proc():
    return glm5v.ImageProcessor()


def test_not_an_image(proc):
    with pytest.raises(glm5v.DecodeError, match=r"<bytes #1>: not a supported image"):
        proc(images=[PNG.read_bytes(), b"definitely not an image"])


def test_truncated_png_names_the_file(proc, tmp_path):
    bad = tmp_path / "cut.png"
    bad.write_bytes(PNG.read_bytes()[: PNG.stat().st_size // 2])
    with pytest.raises(glm5v.DecodeError, match=r"cut\.png: corrupt or truncated PNG"):
        proc(images=str(bad))


def test_empty_file(proc, tmp_path):
    f = tmp_path / "empty.jpg"
    f.write_bytes(b"")
    with pytest.raises(glm5v.DecodeError, match="empty.jpg: the file is empty"):
        proc(images=f)


def test_missing_file_is_a_read_error_and_an_oserror(proc):
    with pytest.raises(glm5v.ReadError, match="cannot read /no/such/file.png") as e:
        proc(images="/no/such/file.png")
    assert isinstance(e.value, OSError) and isinstance(e.value, glm5v.Glm5vError)


def test_bad_data_uri(proc):
    with pytest.raises(glm5v.DecodeError, match="bad data URI"):
        proc(images="data:image/png;base64")  # no comma


def test_decode_budget(proc):
    small = glm5v.ImageProcessor(max_pixels=1000)
    with pytest.raises(glm5v.DecodeBudgetError, match="exceeds the decode budget of 1000 pixels"):
        small(images=str(PNG))
    with pytest.raises(glm5v.DecodeBudgetError):
        small.plan([str(PNG)])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_std": [0.2, 0.0, 0.3]}, "zero or non-finite"),
        ({"image_mean": [0.1, 0.2]}, "3 numbers"),
        ({"patch_size": 0}, "must be positive"),
        ({"do_resize": False}, "do_resize=False"),
        ({"resample": 2}, "resample"),
        ({"alpha": "grey"}, "alpha"),
        ({"max_image_tokens": -3}, "non-negative integer"),
        ({"colour": 1}, "unknown option `colour`"),
        ({"do_convert_rgb": False}, "do_convert_rgb=False"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(glm5v.OptionsError, match=message):
        glm5v.ImageProcessor(**kwargs)


def test_upstream_keywords_that_change_nothing(proc):
    out = proc(images=str(PNG))
    same = glm5v.ImageProcessor(size={"longest_edge": 1}, do_convert_rgb=True)(images=str(PNG))
    assert same["pixel_values"].tobytes() == out["pixel_values"].tobytes()


def test_per_call_options_are_checked(proc):
    with pytest.raises(glm5v.OptionsError, match="unknown option"):
        proc(images=str(PNG), shape=3)


def test_bad_preprocessor_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text('{"max_image_tokens": "many"}')
    with pytest.raises(glm5v.OptionsError, match="max_image_tokens"):
        glm5v.ImageProcessor.from_pretrained(tmp_path)


def test_from_pretrained_reads_the_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(
        '{"max_image_tokens": 64, "min_image_tokens": 4, "image_mean": 0.5, "size": {"x": 1}}'
    )
    p = glm5v.ImageProcessor.from_pretrained(tmp_path)
    assert (p.max_image_tokens, p.min_image_tokens, p.image_mean) == (64, 4, [0.5, 0.5, 0.5])
    # keywords override the file
    assert glm5v.ImageProcessor.from_pretrained(tmp_path, max_image_tokens=32).max_image_tokens == 32
    [plan] = p.plan([str(PNG)])
    assert plan["tokens"] <= 64


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((20, 30, 4), np.uint8), "4-channel"),
        (np.zeros((20, 30, 3), np.float32), "must be uint8"),
        (np.zeros((20, 30), np.uint8), "HxWxC or CxHxW"),
        (np.zeros((20, 30, 5), np.uint8), "channel axis"),
        (np.zeros((0, 30, 3), np.uint8), "zero width or height"),
    ],
)
def test_bad_arrays(proc, array, message):
    with pytest.raises(glm5v.DecodeError, match=message):
        proc(images=array)


def test_wrong_types(proc):
    with pytest.raises(TypeError, match="expected a path, bytes"):
        proc(images=3)
    with pytest.raises(ValueError, match="no images"):
        proc(images=[])
    with pytest.raises(ValueError, match="return_tensors"):
        proc(images=str(PNG), return_tensors="tf")


def test_prompt_counts_must_match(proc):
    with pytest.raises(glm5v.OptionsError, match="more <\\|image\\|> than the 0 images"):
        proc.expand_prompt("<|image|>", np.zeros((0, 3), np.int64))
    with pytest.raises(glm5v.OptionsError, match="1 <\\|image\\|> and 0 <\\|video\\|> for 2 images"):
        proc.expand_prompt("<|image|>", [[1, 2, 2], [1, 2, 2]])


def test_video_errors():
    vp = glm5v.VideoProcessor()
    a = np.zeros((28, 28, 3), np.uint8)
    b = np.zeros((56, 28, 3), np.uint8)
    with pytest.raises(glm5v.VideoError, match="a clip needs one size"):
        vp(videos=[[a, b]], clip_fps=2.0, do_sample_frames=False)
    with pytest.raises(glm5v.VideoError, match="fps"):
        vp(videos=[[a, a]], clip_fps=0.0)
    with pytest.raises(ValueError, match="clip_fps"):
        vp(videos=[[a, a]])


def test_video_processor_reads_its_own_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text('{"max_image_tokens": 64}')
    (tmp_path / "video_preprocessor_config.json").write_text(
        '{"fps": 1.0, "max_frames": 4, "max_image_tokens": 100}'
    )
    vp = glm5v.VideoProcessor.from_pretrained(tmp_path)
    assert (vp.fps, vp.max_frames, vp.max_image_tokens) == (1.0, 4, 100)
    assert glm5v.ImageProcessor.from_pretrained(tmp_path).max_image_tokens == 64
    frames = [np.full((56, 84, 3), i * 20, np.uint8) for i in range(10)]
    out = vp(videos=[frames], clip_fps=2.0)  # 10 frames at 2 fps, sampled at 1 fps, at most 4
    assert len(out["frame_indices"][0]) <= 4 and out["video_grid_thw"][0][0] * 2 == len(out["frame_indices"][0])
    with pytest.raises(glm5v.OptionsError, match="fps"):
        (tmp_path / "video_preprocessor_config.json").write_text('{"fps": -1}')
        glm5v.VideoProcessor.from_pretrained(tmp_path)
