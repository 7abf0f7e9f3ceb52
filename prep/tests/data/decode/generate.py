#!/usr/bin/env python3
"""Regenerates the decode fixtures and PIL's decoded RGB hashes (expected.json).

Pinned: pillow==13.0.0, transformers==5.23.0, numpy. Run from anywhere:
    python prep/tests/data/decode/generate.py
Each image is made with PIL from seeded random content; `expected.json` records, per file, what
`convert_to_rgb(load_image(path))` gives, i.e. what the processor works on (size and sha256 of
the RGB bytes: a single-colour transparency key that survives `convert("RGB")` is painted white
there), and, for
images with transparency, what the processor's `convert_to_rgb` gives after `exif_transpose`.
`prep/tests/decode_fixtures.rs` checks the Rust decoder against it, without Python.
"""
import hashlib, io, json, os, struct, zlib
import numpy as np
import PIL
from PIL import Image, ImageOps
from transformers.image_utils import load_image
from transformers.image_transforms import convert_to_rgb

assert PIL.__version__ == "13.0.0", PIL.__version__
HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20260529)


def content(w, h, c=3):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    planes = []
    for _ in range(c):
        f = rng.uniform(0.05, 0.4, 2)
        v = 127 + 90 * np.sin(x * f[0] + rng.uniform(0, 6)) * np.cos(y * f[1]) + rng.normal(0, 20, (h, w))
        planes.append(v)
    a = np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)
    return a if c > 1 else a[..., 0]


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def raw_png(name, w, h, depth, ctype, rows, plte=None, trns=None):
    s = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
    if plte is not None:
        s += chunk(b"PLTE", plte)
    if trns is not None:
        s += chunk(b"tRNS", trns)
    s += chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows), 9))
    s += chunk(b"IEND", b"")
    open(os.path.join(HERE, name), "wb").write(s)


def pack(a, bits):
    rows = []
    for r in a:
        v = n = 0
        out = bytearray()
        for p in r:
            v, n = (v << bits) | int(p), n + bits
            if n == 8:
                out.append(v)
                v = n = 0
        if n:
            out.append(v << (8 - n))
        rows.append(bytes(out))
    return rows


def exif_ifd(o, typ=3, count=1, le=True):
    """A TIFF structure whose IFD0 holds only an Orientation entry."""
    e = "<" if le else ">"
    value = struct.pack(e + "HH", o, 0) if typ == 3 else struct.pack(e + "I", o)
    ifd = struct.pack(e + "H", 1) + struct.pack(e + "HHI", 0x112, typ, count) + value + struct.pack(e + "I", 0)
    return (b"II*\0" if le else b"MM\0*") + struct.pack(e + "I", 8) + ifd


def app1(d):
    return b"\xff\xe1" + struct.pack(">H", len(d) + 2) + d


def raw_gif(name, sw, sh, fx, fy, fw, fh, idx, gpal=None, lpal=None, trans=None, interlace=False):
    """A one-frame GIF; the LZW data is taken from a GIF PIL writes for the same indices."""
    s = b"GIF89a" + struct.pack("<HH", sw, sh) + (bytes([0x87, 0, 0]) + gpal if gpal is not None else bytes(3))
    if trans is not None:
        s += b"!\xf9\x04" + bytes([1, 0, 0, trans, 0])
    flags = (0x87 if lpal is not None else 0) | (0x40 if interlace else 0)
    s += b"," + struct.pack("<HHHH", fx, fy, fw, fh) + bytes([flags]) + (lpal if lpal is not None else b"")
    rows = idx
    if interlace:
        rows = idx[list(range(0, fh, 8)) + list(range(4, fh, 8)) + list(range(2, fh, 4)) + list(range(1, fh, 2))]
    im = Image.fromarray(rows.astype(np.uint8), "P")
    im.putpalette(bytes(768))
    b = io.BytesIO()
    im.save(b, "GIF", optimize=False)
    g = b.getvalue()
    i = g.index(b",", 13 + 768 if g[10] & 0x80 else 13)
    j = i + 10 + ((3 << ((g[i + 9] & 7) + 1)) if g[i + 9] & 0x80 else 0)
    open(os.path.join(HERE, name), "wb").write(s + g[j:])


def raw_bmp(name, w, h, bpp, rows, compression=0, masks=None, topdown=False):
    stride = (w * bpp // 8 + 3) & ~3
    data = b"".join(r + b"\0" * (stride - len(r)) for r in rows)
    extra = b"".join(struct.pack("<I", m) for m in masks) if masks else b""
    off = 14 + 40 + len(extra)
    s = b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off)
    s += struct.pack("<IiiHHIIiiII", 40, w, -h if topdown else h, 1, bpp, compression, len(data), 2835, 2835, 0, 0)
    open(os.path.join(HERE, name), "wb").write(s + extra + data)


def raw_tiff(name, w, h, bps, spp, photometric, data, extra_samples=None):
    """An uncompressed single-strip little-endian TIFF."""
    entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, spp, None), (259, 3, 1, 1), (262, 3, 1, photometric),
               (273, 4, 1, None), (277, 3, 1, spp), (278, 4, 1, h), (279, 4, 1, len(data))]
    if extra_samples is not None:
        entries.append((338, 3, 1, extra_samples))
    n = len(entries)
    bps_off = 8 + 2 + 12 * n + 4
    data_off = bps_off + 2 * spp
    body = b""
    for tag, typ, cnt, val in entries:
        if tag == 258:
            v = struct.pack("<HH", bps, bps if spp == 2 else 0) if spp <= 2 else struct.pack("<I", bps_off)
        elif tag == 273:
            v = struct.pack("<I", data_off)
        elif typ == 3:
            v = struct.pack("<HH", val, 0)
        else:
            v = struct.pack("<I", val)
        body += struct.pack("<HHI", tag, typ, cnt) + v
    out = b"II*\0" + struct.pack("<IH", 8, n) + body + struct.pack("<I", 0) + struct.pack("<" + "H" * spp, *[bps] * spp)
    open(os.path.join(HERE, name), "wb").write(out + data)


def save(im, name, **kw):
    im.save(os.path.join(HERE, name), **kw)


def make():
    W, H = 45, 29  # odd, several MCUs
    a, g, al = content(W, H), content(W, H, 1), content(W, H, 1)
    rgba = Image.fromarray(np.dstack([a, al]), "RGBA")
    # JPEG
    for ss, tag in ((0, "444"), (1, "422"), (2, "420")):
        save(Image.fromarray(a), f"jpeg_{tag}_q90.jpg", quality=90, subsampling=ss)
        save(Image.fromarray(a), f"jpeg_{tag}_q50_progressive.jpg", quality=50, subsampling=ss, progressive=True)
    save(Image.fromarray(content(17, 13)), "jpeg_17x13_q75.jpg", quality=75)
    save(Image.fromarray(g), "jpeg_gray.jpg", quality=85)
    save(Image.fromarray(content(W, H, 4), "CMYK"), "jpeg_cmyk.jpg", quality=90)
    # PNG through PIL
    save(Image.fromarray(a), "png_rgb.png")
    save(Image.fromarray(g), "png_l.png")
    save(Image.fromarray(np.dstack([g, al]), "LA"), "png_la.png")
    save(rgba, "png_rgba.png")
    save(Image.fromarray(g > 127), "png_1bit.png")
    pim = Image.fromarray(a).quantize(200)
    save(pim, "png_p.png")
    save(pim, "png_p_trns_bytes.png", transparency=bytes(rng.integers(0, 256, 200, dtype=np.uint8)))
    save(pim, "png_p_trns_index.png", transparency=3)
    save(Image.fromarray(a).quantize(16), "png_p4.png", bits=4)
    save(Image.fromarray(g), "png_l_trns.png", transparency=int(g[0, 0]))
    save(Image.fromarray(a), "png_rgb_trns.png", transparency=tuple(int(v) for v in a[0, 0]))
    # PNG written by hand: 16-bit and low bit depths PIL does not write
    w, h = 23, 17
    raw_png("png_rgb16.png", w, h, 16, 2, [r.tobytes() for r in rng.integers(0, 65536, (h, w, 3)).astype(">u2")])
    raw_png("png_rgba16.png", w, h, 16, 6, [r.tobytes() for r in rng.integers(0, 65536, (h, w, 4)).astype(">u2")])
    raw_png("png_la16.png", w, h, 16, 4, [r.tobytes() for r in rng.integers(0, 65536, (h, w, 2)).astype(">u2")])
    g16 = np.where(rng.random((h, w)) < 0.5, rng.integers(0, 300, (h, w)), rng.integers(0, 65536, (h, w)))
    raw_png("png_i16.png", w, h, 16, 0, [r.tobytes() for r in g16.astype(">u2")])
    for bits in (2, 4):
        raw_png(f"png_l{bits}.png", w, h, bits, 0, pack(rng.integers(0, 1 << bits, (h, w)), bits))
    raw_png("png_p2_trns.png", w, h, 2, 3, pack(rng.integers(0, 4, (h, w)), 2),
            plte=bytes(rng.integers(0, 256, 12, dtype=np.uint8)), trns=bytes([0, 128]))
    # WebP
    save(Image.fromarray(a), "webp_lossy.webp", quality=80)
    save(rgba, "webp_lossy_alpha.webp", quality=80)
    save(Image.fromarray(a), "webp_lossless.webp", lossless=True)
    save(rgba, "webp_lossless_alpha.webp", lossless=True)
    frames = [Image.fromarray(content(W, H)) for _ in range(3)]
    save(frames[0], "webp_animated.webp", save_all=True, append_images=frames[1:], duration=100)
    # GIF
    save(Image.fromarray(a).quantize(128), "gif.gif")
    save(Image.fromarray(a).quantize(128), "gif_transparent.gif", transparency=5)
    save(Image.fromarray(g), "gif_gray.gif")
    frames = [Image.fromarray(content(W, H)).quantize(64) for _ in range(3)]
    save(frames[0], "gif_animated.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    # BMP
    save(Image.fromarray(a), "bmp_24.bmp")
    save(Image.fromarray(a).quantize(100), "bmp_8_palette.bmp")
    save(Image.fromarray(g > 127), "bmp_1.bmp")
    save(rgba, "bmp_32.bmp")
    # TIFF
    save(Image.fromarray(a), "tiff_rgb_lzw.tif", compression="tiff_lzw")
    save(Image.fromarray(a), "tiff_rgb_deflate.tif", compression="tiff_adobe_deflate")
    save(Image.fromarray(g), "tiff_l_packbits.tif", compression="packbits")
    save(rgba, "tiff_rgba.tif")
    save(Image.fromarray(content(W, H, 4), "CMYK"), "tiff_cmyk.tif")
    save(Image.fromarray(g > 127), "tiff_1bit.tif")
    save(Image.fromarray(a).quantize(60), "tiff_palette.tif", compression="tiff_lzw")
    save(Image.fromarray(rng.integers(0, 600, (H, W)).astype(np.uint16)), "tiff_i16.tif")
    # EXIF orientation 1-8 (JPEG APP1, PNG eXIf, WebP EXIF, TIFF IFD0) and XMP
    b = content(13, 7)
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        save(Image.fromarray(b), f"orient{o}.jpg", exif=ex, quality=90)
        save(Image.fromarray(b), f"orient{o}.png", exif=ex)
        save(Image.fromarray(b), f"orient{o}.webp", exif=ex, lossless=True)
        save(Image.fromarray(b), f"orient{o}.tif", tiffinfo={274: o})
    xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description tiff:Orientation="6"/></rdf:RDF></x:xmpmeta>'
    save(Image.fromarray(b), "orient6_xmp.jpg", xmp=xmp, quality=90)

    # Metadata edge cases: PNG eXIf after IDAT, "Raw profile type exif" (zTXt), XMP (iTXt);
    # JPEG Orientation stored as LONG, with a count of 2, out of range; EXIF beating XMP.
    buf = io.BytesIO()
    Image.fromarray(b).save(buf, "PNG")
    png, iend = buf.getvalue(), buf.getvalue().rindex(b"IEND") - 4
    open(os.path.join(HERE, "png_exif_after_idat_o8.png"), "wb").write(png[:iend] + chunk(b"eXIf", exif_ifd(8)) + png[iend:])
    e = b"Exif\0\0" + exif_ifd(6, le=False)
    txt = f"\nexif\n{len(e):8}\n{e.hex()}\n".encode()
    open(os.path.join(HERE, "png_raw_profile_o6.png"), "wb").write(
        png[:33] + chunk(b"zTXt", b"Raw profile type exif\0\0" + zlib.compress(txt)) + png[33:])
    xmp = b"<x:xmpmeta><rdf:Description><tiff:Orientation>3</tiff:Orientation></rdf:Description></x:xmpmeta>"
    open(os.path.join(HERE, "png_xmp_o3.png"), "wb").write(
        png[:33] + chunk(b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + zlib.compress(xmp)) + png[33:])
    buf = io.BytesIO()
    Image.fromarray(b).save(buf, "JPEG", quality=90)
    jpg = buf.getvalue()
    for name, ex in (("long7", exif_ifd(7, typ=4)), ("count2_5", exif_ifd(5, count=2)), ("o9", exif_ifd(9))):
        open(os.path.join(HERE, f"jpeg_exif_{name}.jpg"), "wb").write(jpg[:2] + app1(b"Exif\0\0" + ex) + jpg[2:])
    xmp8 = b'http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation="8"/>'
    open(os.path.join(HERE, "jpeg_exif3_xmp8.jpg"), "wb").write(
        jpg[:2] + app1(b"Exif\0\0" + exif_ifd(3)) + app1(xmp8) + jpg[2:])
    # GIF layouts: frame inside / past the screen, transparent fill, local palette, no palette
    # at all (gray indices), interlaced.
    idx = rng.integers(0, 256, (9, 7))
    pal, pal2 = bytes(rng.integers(0, 256, 768, dtype=np.uint8)), bytes(rng.integers(0, 256, 768, dtype=np.uint8))
    raw_gif("gif_frame_offset.gif", 20, 15, 3, 4, 7, 9, idx, gpal=pal)
    raw_gif("gif_frame_offset_transparent.gif", 20, 15, 3, 4, 7, 9, idx, gpal=pal, trans=9)
    raw_gif("gif_frame_past_screen.gif", 8, 6, 3, 4, 7, 9, idx, gpal=pal)
    raw_gif("gif_local_palette.gif", 7, 9, 0, 0, 7, 9, idx, gpal=pal, lpal=pal2)
    raw_gif("gif_no_palette.gif", 7, 9, 0, 0, 7, 9, idx)
    raw_gif("gif_interlaced.gif", 7, 9, 0, 0, 7, 9, idx, gpal=pal, interlace=True)
    # BMP 16-bit (5-5-5 and 5-6-5 bitfields), 32-bit BGRX, top-down 24-bit
    px = rng.integers(0, 65536, (11, 19)).astype("<u2")
    raw_bmp("bmp_16_555.bmp", 19, 11, 16, [r.tobytes() for r in px[::-1]])
    raw_bmp("bmp_16_565.bmp", 19, 11, 16, [r.tobytes() for r in px[::-1]], 3, [0xF800, 0x07E0, 0x001F])
    raw_bmp("bmp_32_bgrx.bmp", 19, 11, 32, [r.tobytes() for r in rng.integers(0, 256, (11, 19, 4), dtype=np.uint8)])
    raw_bmp("bmp_24_top_down.bmp", 19, 11, 24, [r.tobytes() for r in content(19, 11)], topdown=True)
    # TIFF: 16-bit RGB, gray+alpha, WhiteIsZero, associated alpha (RGBa), RGBX
    raw_tiff("tiff_rgb16.tif", 19, 11, 16, 3, 2, rng.integers(0, 65536, (11, 19, 3)).astype("<u2").tobytes())
    raw_tiff("tiff_la.tif", 19, 11, 8, 2, 1, content(19, 11, 2).tobytes(), extra_samples=2)
    raw_tiff("tiff_white_is_zero.tif", 19, 11, 8, 1, 0, content(19, 11, 1).tobytes())
    pm = content(19, 11, 4)
    pm[..., :3] = (pm[..., :3].astype(int) * pm[..., 3:4] // 255).astype(np.uint8)
    raw_tiff("tiff_rgba_associated.tif", 19, 11, 8, 4, 2, pm.tobytes(), extra_samples=1)
    raw_tiff("tiff_rgbx.tif", 19, 11, 8, 4, 2, content(19, 11, 4).tobytes(), extra_samples=0)


def orientation(im):
    """The EXIF orientation `exif_transpose` acts on (1 when absent or outside 1-8)."""
    o = im.getexif().get(0x0112, 1)
    return o if isinstance(o, int) and 1 <= o <= 8 else 1


def sha(x):
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def main():
    for f in os.listdir(HERE):
        if f.split(".")[-1] in ("jpg", "png", "webp", "gif", "bmp", "tif"):
            os.remove(os.path.join(HERE, f))
    make()
    expected = {}
    for f in sorted(os.listdir(HERE)):
        if f.split(".")[-1] not in ("jpg", "png", "webp", "gif", "bmp", "tif"):
            continue
        p = os.path.join(HERE, f)
        # What the processor works on: load_image, then its convert_to_rgb, which paints a
        # single-colour transparency key that survived convert("RGB") white.
        rgb = convert_to_rgb(load_image(p), return_numpy=True)
        e = {"width": rgb.shape[1], "height": rgb.shape[0], "format": Image.open(p).format,
             "orientation": orientation(Image.open(p)), "rgb_sha256": sha(rgb)}
        im = ImageOps.exif_transpose(Image.open(p))
        if "A" in im.getbands() or im.info.get("transparency") is not None:
            e["white_sha256"] = sha(convert_to_rgb(im, return_numpy=True))
        expected[f] = e
    with open(os.path.join(HERE, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(len(expected), "fixtures")


if __name__ == "__main__":
    main()
