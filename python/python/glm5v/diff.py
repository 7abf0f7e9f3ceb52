"""``diff``: two tap dumps compared tap by tap in forward order, by the same engine as
``glm5v diff`` (max |diff|, relative L2 in f64, cosine, NaN/Inf agreement, the worst element
located in the batch), judged by one tolerance preset of ``conformance/src/tolerance.rs``."""

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _glm5v

Taps = Union[str, "os.PathLike[str]", Mapping[str, Any]]

#: Tolerance presets: name -> the bound in words.
PRESETS: Dict[str, str] = dict(_glm5v.tolerance_presets())

_DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
    np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64",
    np.dtype(np.int32): "I32",
}


@dataclass(frozen=True)
class TapResult:
    """One tap's comparison."""

    name: str
    shape_a: Tuple[int, ...]
    shape_b: Tuple[int, ...]
    #: "pass", "fail", "non_finite" (NaN/Inf positions differ) or "shape_mismatch".
    verdict: str
    #: Why it failed, in words (None when it passed).
    reason: Optional[str]
    max_abs: Optional[float]
    rel_l2: Optional[float]
    cosine: Optional[float]
    #: Where the worst element sits: (row, col, value in a, value in b).
    worst: Optional[Tuple[int, int, float, float]]
    #: The input of the batch it belongs to, in words ("image 0 patch (3, 5)").
    worst_at: Optional[str]

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def _where(loc: Optional[Dict[str, Any]]) -> Optional[str]:
    if not loc:
        return None
    s = f"{loc['kind']} {loc['index']}"
    if loc["kind"] == "video" or loc["frame_pair"] > 0:
        s += f" frame pair {loc['frame_pair']}"
    what = "merged token" if loc["merged"] else "patch"
    r, c = loc["grid_pos"]
    return f"{s} {what} ({r}, {c})"


class DiffReport:
    """The comparison of dump ``a`` (candidate) against dump ``b`` (reference).

    ``passed``, ``first_divergence`` (the first tap in forward order that fails), ``taps``
    (:class:`TapResult` in forward order, also by name: ``report["blocks.0"]``), ``only_in_a`` /
    ``only_in_b``, ``tolerance`` (dict: name, rel_l2, min_cosine, self_disagreement);
    ``str(report)`` is the table ``glm5v diff`` prints, ``report.json()`` its JSON.
    """

    def __init__(self, raw_json: str, table: str) -> None:
        self._json = raw_json
        self._table = table
        d = json.loads(raw_json)
        self.raw: Dict[str, Any] = d
        self.passed: bool = d["passed"]
        self.first_divergence: Optional[str] = d["first_divergence"]
        self.tolerance: Dict[str, Any] = d["tolerance"]
        self.only_in_a: List[str] = d["only_in_a"]
        self.only_in_b: List[str] = d["only_in_b"]
        self.layout_mismatch: Optional[str] = d["layout_mismatch"]
        self.taps: List[TapResult] = []
        for t in d["taps"]:
            s = t.get("stats") or {}
            w = s.get("worst")
            self.taps.append(
                TapResult(
                    name=t["name"],
                    shape_a=tuple(t["shape_a"]),
                    shape_b=tuple(t["shape_b"]),
                    verdict=t["verdict"],
                    reason=t["reason"],
                    max_abs=s.get("max_abs"),
                    rel_l2=s.get("rel_l2"),
                    cosine=s.get("cosine"),
                    worst=(w["row"], w["col"], w["a"], w["b"]) if w else None,
                    worst_at=_where(t.get("worst_at")),
                )
            )
        self._by_name = {t.name: t for t in self.taps}

    def __getitem__(self, name: str) -> TapResult:
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.taps)

    def __len__(self) -> int:
        return len(self.taps)

    @property
    def failures(self) -> List[TapResult]:
        return [t for t in self.taps if not t.passed]

    def table(self) -> str:
        return self._table

    def json(self) -> str:
        return self._json

    def __str__(self) -> str:
        return self._table

    def __repr__(self) -> str:
        verdict = "PASS" if self.passed else f"FAIL at {self.first_divergence}"
        return f"<DiffReport {verdict}: {len(self.taps)} taps, tolerance {self.tolerance['name']}>"


def _held(taps: Mapping[str, Any], metadata: Optional[Mapping[str, Any]]) -> Tuple[list, Dict[str, str]]:
    tensors = []
    for name, v in taps.items():
        if type(v).__module__.startswith("torch"):
            v = v.detach().float().cpu().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
        a = np.asarray(v)
        if a.dtype not in _DTYPES:
            a = a.astype(np.float32)
        if a.ndim != 2 and name not in ("image_grid_thw", "video_grid_thw"):
            a = a.reshape(-1, a.shape[-1]) if a.ndim > 2 else a.reshape(1, -1)
        a = np.ascontiguousarray(a)
        le = a.astype(a.dtype.newbyteorder("<"), copy=False)
        tensors.append((str(name), _DTYPES[a.dtype], list(a.shape), le.tobytes()))
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    return tensors, meta


def _side(x: Any) -> Any:
    if isinstance(x, (str, os.PathLike)):
        return os.fspath(x)
    if hasattr(x, "taps") and hasattr(x, "metadata") and not isinstance(x, Mapping):
        return _held(x.taps, x.metadata)  # a glm5v.taps.Recording (or a subset of a dump)
    if isinstance(x, Mapping):
        return _held(x, None)
    raise TypeError(f"a tap dump must be a path or a mapping of name -> array, got {type(x).__name__}")


def diff(a: Taps, b: Taps, tolerance: Union[str, float, None] = None) -> DiffReport:
    """Compares tap dump ``a`` (candidate) with ``b`` (reference): safetensors paths in the
    tap-dump layout, or mappings name -> 2-D array (numpy or torch; a :class:`glm5v.taps.Recording`
    too). ``tolerance``: a preset name (``"f32-vs-upstream"``, the default, scaled by ``b``'s
    ``self_disagreement``; ``"gpu-f32"``; ``"gpu-bf16"``) or a number (a relative-L2 bound)."""
    if isinstance(tolerance, bool):
        raise TypeError("tolerance must be a preset name or a number")
    la, lb = (getattr(x, "label", None) for x in (a, b))
    if isinstance(tolerance, (int, float)):
        raw, table = _glm5v.diff(_side(a), _side(b), None, float(tolerance), la, lb)
    else:
        raw, table = _glm5v.diff(_side(a), _side(b), tolerance, None, la, lb)
    return DiffReport(raw, table)
