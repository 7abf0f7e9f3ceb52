"""Writes the committed seed corpus, fuzz/corpus/seed/<target>/ (run from the repo root with
the project venv: /work/venv/bin/python fuzz/make_seeds.py). Small inputs only (the corpus stays
well under 2 MB): a few fixture images under 16 KB, tiny images of every format and PIL mode
the decoders handle, data URIs of some of them, the fixture configs, and checkpoints of the
small config the `checkpoint` target uses. Every image seed starts with the mode byte the
targets read first (0: alpha drop / vision config / model.safetensors)."""
import base64, io, json, os, struct
import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = os.path.join(ROOT, "fuzz", "corpus", "seed")


def put(target, name, data):
    d = os.path.join(SEED, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def enc(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


rng = np.random.default_rng(6)
rgb = Image.fromarray(rng.integers(0, 256, (12, 17, 3), dtype=np.uint8), "RGB")
rgba = Image.fromarray(rng.integers(0, 256, (9, 7, 4), dtype=np.uint8), "RGBA")
gray16 = Image.fromarray(rng.integers(0, 65536, (6, 10), dtype=np.uint16))
frames = [Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "RGB") for _ in range(3)]
exif = Image.Exif()
exif[0x0112] = 6
images = {
    "png_rgb": enc(rgb, "PNG"),
    "png_rgba": enc(rgba, "PNG"),
    "png_la": enc(rgba.convert("LA"), "PNG"),
    "png_p": enc(rgb.convert("P"), "PNG"),
    "png_p_trns": enc(rgb.convert("P"), "PNG", transparency=3),
    "png_gray16": enc(gray16, "PNG"),
    "jpeg_420": enc(rgb, "JPEG", quality=80),
    "jpeg_444_progressive": enc(rgb, "JPEG", quality=90, subsampling=0, progressive=True),
    "jpeg_cmyk": enc(rgb.convert("CMYK"), "JPEG"),
    "jpeg_gray": enc(rgb.convert("L"), "JPEG"),
    "jpeg_exif6": enc(rgb, "JPEG", exif=exif.tobytes()),
    "gif_anim": enc(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50),
    "gif_trns": enc(rgb.convert("P"), "GIF", transparency=1),
    "webp_lossless": enc(rgba, "WEBP", lossless=True),
    "webp_lossy": enc(rgb, "WEBP", quality=50),
    "webp_anim": enc(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=50),
    "bmp_rgb": enc(rgb, "BMP"),
    "bmp_p": enc(rgb.convert("P"), "BMP"),
    "tiff_rgb": enc(rgb, "TIFF"),
    "tiff_cmyk": enc(rgb.convert("CMYK"), "TIFF"),
    "tiff_gray16": enc(gray16, "TIFF"),
}
for name, data in images.items():
    put("image", name, b"\x00" + data)
for name in ["tiny_1x1.png", "tiny_3x5.png", "sliver_1x600.png", "jpeg_exif_7.jpg", "png_palette_alpha.png"]:
    with open(os.path.join(ROOT, "fixtures", "prep", "images", name), "rb") as f:
        put("image", "fixture_" + name, b"\x01" + f.read())

for name in ["png_rgb", "jpeg_420", "gif_anim", "webp_lossless"]:
    mime = name.split("_")[0]
    put("data_uri", name, f"data:image/{mime};base64,".encode() + base64.b64encode(images[name]))
put("data_uri", "wrapped_lines", base64.encodebytes(images["png_p"]))

for src in ["reference/tests/data/tiny/config.json", "fixtures/tower/tiny/config.json"]:
    p = os.path.join(ROOT, src)
    if os.path.exists(p):
        with open(p, "rb") as f:
            put("config_json", src.replace("/", "_"), b"\x00" + f.read())
put("config_json", "bare", b"\x00" + json.dumps({"depth": 2, "hidden_size": 64, "num_heads": 4}).encode())
put("config_json", "preprocessor", b"\x01" + json.dumps({"min_image_tokens": 4, "max_image_tokens": 64,
    "patch_size": 14, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": 0.5,
    "do_rescale": True, "rescale_factor": 1 / 255, "resample": 3}).encode())
put("config_json", "video_preprocessor", b"\x03" + json.dumps({"fps": 2.0, "max_frames": 16,
    "do_sample_frames": True, "max_image_tokens": 240000}).encode())

# The checkpoint target's config: depth 1, hidden 8, 2 heads (head_dim 4), intermediate 8,
# out 8, projection 8, patch 2, temporal 2, merge 2, 3 channels, attention_bias (default true).
D, HD, I, O, P, M = 8, 4, 8, 8, 8, 2
specs = [("patch_embed.proj.weight", [D, 3, 2, 2, 2]), ("patch_embed.proj.bias", [D])]
b = "blocks.0."
specs += [(b + "norm1.weight", [D]), (b + "norm2.weight", [D]), (b + "attn.qkv.weight", [3 * D, D]),
          (b + "attn.proj.weight", [D, D]), (b + "attn.q_norm.weight", [HD]), (b + "attn.k_norm.weight", [HD]),
          (b + "mlp.gate_proj.weight", [I, D]), (b + "mlp.up_proj.weight", [I, D]), (b + "mlp.down_proj.weight", [D, I]),
          (b + "attn.qkv.bias", [3 * D]), (b + "attn.proj.bias", [D]), (b + "mlp.gate_proj.bias", [I]),
          (b + "mlp.up_proj.bias", [I]), (b + "mlp.down_proj.bias", [D])]
specs += [("post_layernorm.weight", [D]), ("downsample.weight", [O, D, M, M]), ("downsample.bias", [O]),
          ("merger.proj.weight", [O, O]), ("merger.post_projection_norm.weight", [O]),
          ("merger.post_projection_norm.bias", [O]), ("merger.gate_proj.weight", [P, O]),
          ("merger.up_proj.weight", [P, O]), ("merger.down_proj.weight", [O, P])]


def safetensors_bytes(dtype):
    header, data = {}, b""
    for name, shape in specs:
        n = int(np.prod(shape))
        vals = rng.standard_normal(n).astype(np.float32)
        raw = vals.tobytes() if dtype == "F32" else (vals.view(np.uint32) >> 16).astype("<u2").tobytes()
        header["model.visual." + name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


put("checkpoint", "valid_f32", b"\x00" + safetensors_bytes("F32"))
put("checkpoint", "valid_bf16", b"\x00" + safetensors_bytes("BF16"))
index = {"metadata": {}, "weight_map": {"model.visual." + n: "a.safetensors" for n, _ in specs}}
index["weight_map"]["model.language_model.lm_head.weight"] = "text.safetensors"
put("checkpoint", "index", b"\x01" + json.dumps(index).encode())

# The differential targets of issue 26 (their own generator, so the seeds above stay as they were).
rng2 = np.random.default_rng(26)


def smooth(h, w):
    """A smooth, cheaply compressed RGB image (gradients and a few blobs)."""
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) // 7 % 256)], -1)
    return Image.fromarray(a.astype(np.uint8), "RGB")


# prep_images: every image seed (mode byte 0: drop alpha, 64 tokens, 1 Mpixel, one copy; 1: over
# white; 8: two copies), and JPEGs of 512k pixels or more, which prep decodes in stripes.
for name, data in images.items():
    put("prep_images", name, b"\x00" + data)
put("prep_images", "png_rgb_batch2", b"\x08" + images["png_rgb"])
put("prep_images", "png_rgba_white", b"\x01" + images["png_rgba"])
big = smooth(520, 1024)
put("prep_images", "jpeg_1024x520_420", b"\x00" + enc(big, "JPEG", quality=30))
put("prep_images", "jpeg_1024x520_prog", b"\x06" + enc(big, "JPEG", quality=30, progressive=True))
put("prep_images", "png_1024x520", b"\x00" + enc(big, "PNG", optimize=True))

# jpeg_stripes: the JPEG seeds (stripes forced at any size) and large smooth JPEGs of each
# subsampling, baseline and progressive, with restart markers.
for name in ["jpeg_420", "jpeg_444_progressive", "jpeg_cmyk", "jpeg_gray", "jpeg_exif6"]:
    put("jpeg_stripes", name, b"\x00" + images[name])
put("jpeg_stripes", "smooth_420", b"\x21" + enc(smooth(96, 80), "JPEG", quality=60))
put("jpeg_stripes", "smooth_422", b"\x42" + enc(smooth(70, 96), "JPEG", quality=60, subsampling=1))
put("jpeg_stripes", "smooth_444_prog", b"\x83" + enc(smooth(90, 60), "JPEG", quality=60, subsampling=0, progressive=True))
put("jpeg_stripes", "big_420", b"\x01" + enc(big, "JPEG", quality=30))
put("jpeg_stripes", "restart_gray", b"\x02" + enc(smooth(64, 64).convert("L"), "JPEG", quality=50, restart_marker_rows=1))

# split_inflate: raw zlib streams (mode 0) of a few kinds of data, and stream programs (mode 1).
import zlib
for i, (kind, level) in enumerate([("text", 6), ("noise", 1), ("runs", 9), ("rows", 6), ("rows", 1)]):
    n = 3000
    if kind == "text":
        d = b"the quick brown fox jumps over the lazy dog " * (n // 44)
    elif kind == "noise":
        d = rng2.integers(0, 256, n, dtype=np.uint8).tobytes()
    elif kind == "runs":
        d = bytes((j // 97) % 7 for j in range(n))
    else:
        d = np.asarray(smooth(8, 120)).tobytes()
    put("split_inflate", f"zlib_{kind}_{level}", b"\x00" + zlib.compress(d, level))
for i in range(8):
    put("split_inflate", f"program_{i}", b"\x01" + rng2.integers(0, 256, 600 + 300 * i, dtype=np.uint8).tobytes())
# prep_images, mode bit 4: recipes for large RGB PNGs used at their own size (the two-thread inflate
# inside prep): sides, noise, seed, filter, level, a flipped byte or not, then pixel bytes.
for i, head in enumerate([[15, 15, 20, 1, 5, 5, 0, 0], [11, 7, 63, 2, 4, 8, 0, 0], [15, 9, 8, 3, 1, 0, 1, 200], [3, 15, 30, 4, 5, 6, 0, 0]]):
    put("prep_images", f"recipe_png_{i}", b"\x10" + bytes(head) + rng2.integers(0, 256, 97 + 50 * i, dtype=np.uint8).tobytes())
