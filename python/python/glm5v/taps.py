"""Recording taps from a PyTorch module into the tap-dump layout (TAPS.md section 2), and
reading / writing tap dumps without the ``safetensors`` package.

>>> with glm5v.taps.record(model) as rec:          # doctest: +SKIP
...     model(hidden_states=pixel_values, grid_thw=grid)
>>> glm5v.testing.assert_taps_close(rec, "upstream.safetensors")   # doctest: +SKIP

By default ``record`` hooks the modules upstream's ``Glm5NextVisionModel`` names (``patch_embed``,
``rotary_pos_emb`` (its ``(cos, sin)`` output becomes ``rotary_pos_emb.cos`` / ``.sin``),
``blocks.{i}.norm1`` ... ``blocks.{i}``, ``blocks.{i}.attn.proj.input`` (the input of
``attn.proj``, by a pre-hook), ``post_layernorm``, ``downsample``, ``merger.*``, ``merger``).
For a port of your own, ``name_map`` maps tap names to your module paths; a mapped name that
ends in ``.input`` records that module's first input. Each value is flattened as upstream's
dump is: ``float32``, ``[shape[0], -1]``. torch is needed only by ``record``.
"""

import json
import os
import struct
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from . import _glm5v

__all__ = ["record", "Recording", "save", "load", "tap_names"]

_ST_DTYPES = {"<f4": "F32", "<f8": "F64", "<f2": "F16", "<i8": "I64", "<i4": "I32", "|u1": "U8"}
_NP_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def tap_names(depth: int) -> list:
    """Every tap name of a tower of ``depth`` blocks, in forward order."""
    return _glm5v.tap_names(depth)


def save(path: "os.PathLike[str] | str", taps: Mapping[str, Any], metadata: Optional[Mapping[str, Any]] = None) -> None:
    """Writes ``taps`` (name -> array) as a safetensors file, atomically (temporary name, then
    rename). Float taps are stored as F32 2-D ``[rows, cols]``; grids as I64."""
    tensors = []
    for name, v in taps.items():
        a = np.asarray(_numpy(v))
        if name in ("image_grid_thw", "video_grid_thw"):
            a = a.astype("<i8").reshape(-1, 3)
        elif np.issubdtype(a.dtype, np.floating):
            a = a.astype("<f4").reshape(a.shape[0], -1) if a.ndim != 2 else a.astype("<f4")
        a = np.ascontiguousarray(a)
        key = a.dtype.str if a.dtype.str in _ST_DTYPES else None
        if key is None:
            raise ValueError(f"tap {name!r}: dtype {a.dtype} cannot be stored")
        tensors.append((name, _ST_DTYPES[key], a))
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dt, a in sorted(tensors, key=lambda t: t[0]):
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for _, _, a in sorted(tensors, key=lambda t: t[0]):
                f.write(a.tobytes())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load(path: "os.PathLike[str] | str") -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file (read-only numpy views)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt = _NP_DTYPES.get(info["dtype"])
        if dt is None:
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(raw, dtype=dt, count=(hi - lo) // np.dtype(dt).itemsize, offset=8 + n + lo).reshape(
            info["shape"]
        )
    return out, meta


def _numpy(v: Any) -> Any:
    if type(v).__module__.startswith("torch"):
        return v.detach().to("cpu").float().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
    return v


def _flat2d(t: Any) -> np.ndarray:
    a = t.detach().to("cpu").float()
    return np.ascontiguousarray(a.reshape(a.shape[0], -1).numpy())


def _default_target(name: str) -> Tuple[str, str, Optional[int]]:
    """(module path, "out" | "in", tuple index) of an upstream tap name."""
    if name in ("rotary_pos_emb.cos", "rotary_pos_emb.sin"):
        return "rotary_pos_emb", "out", 0 if name.endswith("cos") else 1
    if name.endswith(".input"):
        return name[: -len(".input")], "in", None
    return name, "out", None


def _upstream_names(modules: Mapping[str, Any]) -> list:
    depth = 0
    while f"blocks.{depth}" in modules:
        depth += 1
    names = [n for n in tap_names(depth) if _default_target(n)[0] in modules]
    return names


class Recording:
    """What :func:`record` captured: ``taps`` (name -> float32 ``[rows, cols]``, the first call
    of each module), ``calls`` (name -> how many times it fired), ``metadata``."""

    def __init__(self, module: Any) -> None:
        self.taps: Dict[str, np.ndarray] = {}
        self.calls: Dict[str, int] = {}
        self.metadata: Dict[str, str] = {
            "producer": "glm5v.taps.record",
            "module": type(module).__name__,
            "precision": "f32",
        }
        self._handles: list = []
        #: How a diff report names this recording.
        self.label = f"<taps.record of {type(module).__name__}>"

    def add_inputs(self, pixel_values: Any, image_grid_thw: Any) -> None:
        """Stores the batch's inputs too, so that a diff can locate rows in the batch."""
        self.taps["pixel_values"] = np.ascontiguousarray(np.asarray(_numpy(pixel_values), dtype=np.float32))
        self.taps["image_grid_thw"] = np.asarray(_numpy(image_grid_thw), dtype=np.int64).reshape(-1, 3)

    def save(self, path: "os.PathLike[str] | str") -> None:
        """Writes the recording as a tap dump (comparable with ``glm5v diff`` and :func:`glm5v.diff`)."""
        save(path, self.taps, self.metadata)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<Recording of {self.metadata['module']}: {len(self.taps)} taps>"


def record(module: Any, names: Optional[Iterable[str]] = None, name_map: Optional[Mapping[str, str]] = None) -> Recording:
    """Hooks ``module`` (a ``torch.nn.Module``) so that its forward records taps; use as a
    context manager (the hooks are removed on exit). ``names``: the taps to record (default:
    every upstream tap name whose module exists, or the keys of ``name_map`` when it is given).
    ``name_map``: tap name -> module path in ``module`` (for a port with other module names).
    A name asked for whose module does not exist raises ``KeyError``."""
    modules = dict(module.named_modules())
    name_map = dict(name_map or {})
    explicit = names is not None or bool(name_map)
    if names is None:
        names = list(name_map) if name_map else _upstream_names(modules)
    names = list(names)
    rec = Recording(module)
    plan: Dict[Tuple[str, str], list] = {}
    for n in names:
        path, kind, idx = _default_target(n)
        if n in name_map:
            path = name_map[n]
            kind, idx = ("in", None) if n.endswith(".input") else ("out", idx)
        if path not in modules:
            if explicit:
                raise KeyError(f"tap {n!r}: {type(module).__name__} has no module {path!r}")
            continue
        plan.setdefault((path, kind), []).append((n, idx))
    if not plan:
        raise KeyError(
            f"{type(module).__name__} has none of upstream's module names; pass name_map "
            "(tap name -> your module path)"
        )

    def store(targets, value):
        for n, idx in targets:
            rec.calls[n] = rec.calls.get(n, 0) + 1
            if n in rec.taps:
                continue
            v = value
            if isinstance(v, (tuple, list)):
                v = v[idx if idx is not None else 0]
            elif hasattr(v, "last_hidden_state") and not hasattr(v, "shape"):
                v = v[0]
            rec.taps[n] = _flat2d(v)

    for (path, kind), targets in plan.items():
        m = modules[path]
        if kind == "in":
            rec._handles.append(m.register_forward_pre_hook(lambda _m, inp, t=targets: store(t, inp[0])))
        else:
            rec._handles.append(m.register_forward_hook(lambda _m, _inp, out, t=targets: store(t, out)))
    return rec
