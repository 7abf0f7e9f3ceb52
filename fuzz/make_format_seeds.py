"""Writes the committed seeds of the `formats` fuzz target, fuzz/corpus/seed/formats/ (run from the
repo root with the project venv after `cargo xtask conformance --corpus` has fetched the Pillow
corpus into target/corpus/: /work/venv/bin/python fuzz/make_format_seeds.py).

- Pillow's own test images of the formats the target covers (BMP, QOI, PNM, TGA, ICO / CUR, TIFF, DDS,
  PSD and the sniffed-only ones: AVIF, JPEG 2000, their first 2 KB), small ones only, as raw-mode inputs (mode byte 0,
  and the same file with the small decode budget, 0x40);
- tiny files PIL writes, one per format and mode;
- recipes for the structured mode (mode byte 0x10 | family, `formats_case.rs::build`): bytes
  from a fixed-seed generator, a few per family and flag combination.
The corpus stays small: each file under 12 KB (QOI and PNM under 40 KB), about 0.5 MB in all."""
import io, os, random
import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = os.path.join(ROOT, "fuzz", "corpus", "seed", "formats")
CORPUS = os.path.join(ROOT, "target", "corpus", "pillow-13.0.0", "Tests", "images")

LIMIT = {"qoi": 40_000, "ppm": 40_000, "pgm": 40_000, "pbm": 40_000, "pnm": 40_000}
EXTS = {"bmp", "dib", "qoi", "pbm", "pgm", "ppm", "pnm", "tga", "ico", "cur", "tif", "tiff",
        "dds", "psd", "avif", "jp2", "j2k"}
SNIFF_ONLY = {"avif", "jp2", "j2k"}


def put(name, data):
    os.makedirs(SEED, exist_ok=True)
    with open(os.path.join(SEED, name), "wb") as f:
        f.write(data)


def main():
    if not os.path.isdir(CORPUS):
        raise SystemExit(f"{CORPUS} is missing: run `cargo xtask conformance --corpus` first")
    n = 0
    per_sniffed = {}
    for dirpath, _, files in sorted(os.walk(CORPUS)):
        for f in sorted(files):
            ext = f.rsplit(".", 1)[-1].lower()
            if ext not in EXTS:
                continue
            path = os.path.join(dirpath, f)
            if os.path.getsize(path) > LIMIT.get(ext, 12_000):
                continue
            if ext in SNIFF_ONLY:
                # the header is what matters for these: two files per format, the first 2 KB
                per_sniffed[ext] = per_sniffed.get(ext, 0) + 1
                if per_sniffed[ext] > 2:
                    continue
            data = open(path, "rb").read()
            if ext in SNIFF_ONLY:
                data = data[:2048]
            rel = os.path.relpath(path, CORPUS).replace(os.sep, "_")
            put(f"pillow_{rel}", b"\x00" + data)
            n += 1
            if n % 4 == 0:
                put(f"pillow_{rel}.small_budget", b"\x40" + data)
    rng = np.random.default_rng(26)
    rgb = Image.fromarray(rng.integers(0, 256, (11, 13, 3), dtype=np.uint8), "RGB")
    rgba = Image.fromarray(rng.integers(0, 256, (9, 7, 4), dtype=np.uint8), "RGBA")
    tiny = {
        "bmp_rgb": (rgb, "BMP"), "bmp_p": (rgb.convert("P"), "BMP"), "bmp_l": (rgb.convert("L"), "BMP"),
        "bmp_1": (rgb.convert("1"), "BMP"), "qoi_rgb": (rgb, "QOI"), "qoi_rgba": (rgba, "QOI"),
        "ppm_rgb": (rgb, "PPM"), "pgm_l": (rgb.convert("L"), "PPM"), "pbm_1": (rgb.convert("1"), "PPM"),
        "tga_rgb": (rgb, "TGA"), "tga_rgba": (rgba, "TGA"), "tga_p": (rgb.convert("P"), "TGA"),
        "tga_rle": (rgb, "TGA"), "ico_rgba": (rgba, "ICO"), "tiff_rgb": (rgb, "TIFF"),
        "tiff_rgba": (rgba, "TIFF"), "tiff_l": (rgb.convert("L"), "TIFF"), "tiff_1": (rgb.convert("1"), "TIFF"),
        "tiff_p": (rgb.convert("P"), "TIFF"), "tiff_cmyk": (rgb.convert("CMYK"), "TIFF"),
    }
    for name, (img, fmt) in tiny.items():
        b = io.BytesIO()
        img.save(b, fmt, **({"compression": "tga_rle"} if name == "tga_rle" else {}))
        put(f"pil_{name}", b"\x00" + b.getvalue())
        put(f"pil_{name}.white", b"\x20" + b.getvalue())
    r = random.Random(26)
    for family in range(8):
        for k in range(8):
            # damage byte 16+ (none) for most, a cut or a flip for some
            damage = [200, 201, 202, 203, 3, 12, 250, 251][k]
            recipe = bytes([damage]) + bytes(r.randrange(256) for _ in range(r.choice([16, 64, 400])))
            mode = 0x10 | family | (0x40 if k == 6 else 0) | (0x80 if k % 2 else 0)
            put(f"recipe_{family}_{k}", bytes([mode]) + recipe)
    print(f"{len(os.listdir(SEED))} seeds in {SEED}")


main()
