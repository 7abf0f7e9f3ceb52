"""pytest helpers: ``assert_taps_close`` compares two tap dumps with :func:`glm5v.diff` and
fails with a message that names the first divergent tap, the bound, the worst element and
where it sits in the batch."""

import os
from typing import Any, Iterable, Mapping, Optional, Union

from .diff import DiffReport, Taps, diff

__all__ = ["assert_taps_close"]


def _fmt(x: Optional[float], spec: str = ".3e") -> str:
    return "n/a" if x is None else format(x, spec)


class _Taps:
    """Taps and metadata, the shape :func:`glm5v.diff` takes for a recording."""

    def __init__(self, taps: Mapping[str, Any], metadata: Mapping[str, Any], label: Optional[str] = None) -> None:
        self.taps, self.metadata, self.label = dict(taps), dict(metadata), label


def _subset(side: Taps, names: Iterable[str]) -> Taps:
    """Only the taps named (and the grids, which locate rows), metadata kept (it scales the
    f32-vs-upstream bound)."""
    keep = set(names) | {"image_grid_thw", "video_grid_thw"}
    if isinstance(side, (str, os.PathLike)):
        from .taps import load

        tensors, meta = load(side)
        return _Taps({k: v for k, v in tensors.items() if k in keep}, meta, f"{os.fspath(side)} (taps asked for)")
    if isinstance(side, Mapping):
        return {k: v for k, v in side.items() if k in keep}
    if hasattr(side, "taps") and hasattr(side, "metadata"):
        return _Taps({k: v for k, v in side.taps.items() if k in keep}, side.metadata)
    return side


def failure_message(report: DiffReport, missing: Iterable[str] = ()) -> str:
    """The message :func:`assert_taps_close` raises with."""
    tol = report.tolerance
    bound = f"rel L2 <= {tol['rel_l2']:.3e}"
    if tol.get("min_cosine") is not None:
        bound += f", cosine >= {tol['min_cosine']}"
    lines = []
    failed = report.failures
    if report.first_divergence:
        lines.append(
            f"taps differ: first divergence at `{report.first_divergence}` "
            f"(tolerance {tol['name']}: {bound}); {len(failed)} of {len(report)} taps fail"
        )
    else:
        lines.append(f"taps differ (tolerance {tol['name']}: {bound})")
    for t in failed[:8]:
        s = f"  {t.name:<28} {str(list(t.shape_a)):<11} {t.reason or t.verdict}"
        if t.rel_l2 is not None:
            s += f"; max|diff| {_fmt(t.max_abs)}, cosine {_fmt(t.cosine, '.6f')}"
        if t.worst is not None:
            r, c, a, b = t.worst
            where = f"{t.worst_at}, " if t.worst_at else ""
            s += f"; worst at {where}row {r} col {c}: {a:.6e} vs {b:.6e}"
        lines.append(s)
    if len(failed) > 8:
        lines.append(f"  ... and {len(failed) - 8} more")
    if report.layout_mismatch:
        lines.append(f"  {report.layout_mismatch}")
    missing = list(missing)
    if missing:
        lines.append(f"  asked for but missing on one side: {', '.join(missing)}")
    if len(report) == 0:
        lines.append("  no tap is present on both sides")
    if len(report) <= 40:
        lines.append("")
        lines.append(report.table())
    else:
        lines.append(f"  (str(glm5v.diff(actual, expected)) prints the table of all {len(report)} taps)")
    return "\n".join(lines)


def assert_taps_close(
    actual: Taps,
    expected: Taps,
    tolerance: Union[str, float, None] = None,
    names: Optional[Iterable[str]] = None,
) -> DiffReport:
    """Asserts that the taps of ``actual`` (the candidate) match ``expected`` (the reference).

    Both are tap-dump paths or mappings name -> 2-D array (numpy or torch), or a
    :class:`glm5v.taps.Recording`. ``tolerance``: a preset name (default ``"f32-vs-upstream"``)
    or a relative-L2 bound. ``names``: only these taps, and each must be on both sides.
    Without ``names`` the taps both sides have are compared, and at least one must be.
    Returns the :class:`glm5v.DiffReport` when it passes; raises ``AssertionError`` otherwise.
    """
    missing = []
    if names is not None:
        names = list(names)
        actual, expected = _subset(actual, names), _subset(expected, names)
    report = diff(actual, expected, tolerance=tolerance)
    if names is not None:
        missing = [n for n in names if n not in report]
    if report.passed and len(report) > 0 and not missing:
        return report
    raise AssertionError(failure_message(report, missing))
