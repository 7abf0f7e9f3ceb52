"""Shared helpers: the repository's fixtures and a small safetensors reader (the tests need
numpy and Pillow only)."""

import base64
import hashlib
import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
PREP = FIXTURES / "prep"
TOWER = FIXTURES / "tower"

_DT = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "F16": "<f2"}


def read_safetensors(path):
    """``(tensors: name -> ndarray, metadata: dict)`` of a safetensors file."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        dt = _DT.get(info["dtype"])
        if dt is None:
            continue
        out[name] = np.frombuffer(raw[base + lo : base + hi], dtype=dt).reshape(info["shape"])
    return out, meta


def f32_sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


def u8_sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.uint8).tobytes()).hexdigest()


def source_text(case_meta, rel):
    """A fixture source as upstream's ``load_image`` got it: a path, or a data URI's text."""
    p = PREP / rel
    if case_meta.get("source_kind") == "data_uri":
        return p.read_text().strip()
    return str(p)


def source_bytes(case_meta, rel):
    """The encoded bytes of a source (a data URI's payload decoded)."""
    p = PREP / rel
    if case_meta.get("source_kind") == "data_uri":
        return base64.b64decode(p.read_text().strip().split(",", 1)[1])
    return p.read_bytes()


def pil_load_image(data: bytes):
    """``transformers.image_utils.load_image`` on encoded bytes: open, EXIF transpose,
    ``convert("RGB")``."""
    from PIL import Image, ImageOps

    img = Image.open(io.BytesIO(data))
    img = ImageOps.exif_transpose(img)
    return img.convert("RGB")


def image_cases():
    out = []
    for f in sorted((PREP / "expected").glob("*.safetensors")):
        _, meta = read_safetensors(f)
        if meta["kind"] in ("image", "images"):
            out.append(f.stem)
    return out


def video_cases():
    out = []
    for f in sorted((PREP / "expected").glob("*.safetensors")):
        _, meta = read_safetensors(f)
        if meta["kind"] == "video":
            out.append(f.stem)
    return out


@pytest.fixture(scope="session")
def glm5v_mod():
    import glm5v

    return glm5v
