"""``Embedder``: a GLM-5.3-Flash vision checkpoint loaded once; images in, embeddings out."""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _glm5v
from ._inputs import to_items

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ImageSpan:
    """Where one input's rows sit in :attr:`EmbedResult.embeddings`."""

    #: ``(t, h, w)`` in patches (``image_grid_thw`` of this input).
    grid_thw: Tuple[int, int, int]
    #: First row (token) of this input.
    token_offset: int
    #: Rows of this input: ``t*h*w / merge_size**2``, one per ``<|image|>`` placeholder.
    token_count: int
    #: The prompt block whose ``<|image|>`` placeholders these rows replace.
    prompt: str

    @property
    def rows(self) -> slice:
        """``embeddings[span.rows]`` are this input's rows."""
        return slice(self.token_offset, self.token_offset + self.token_count)


@dataclass
class EmbedResult:
    """What :meth:`Embedder.embed` returns."""

    #: ``[tokens, out_hidden_size]`` float32 (torch with ``return_tensors="pt"``).
    embeddings: Any
    #: One span per input, in order.
    spans: List[ImageSpan]
    #: ``[I, 3]`` int64, the grids of the batch.
    image_grid_thw: Any
    #: The tap dump of the forward, name -> ``[rows, cols]`` float32, with the inputs
    #: (``pixel_values``, ``image_grid_thw``), when asked for.
    taps: Optional[Dict[str, np.ndarray]] = field(default=None, repr=False)
    #: The precision the forward ran in.
    precision: str = "f32"

    def save_taps(self, path: Any) -> None:
        """Writes :attr:`taps` as a tap dump (``glm5v diff`` and :func:`glm5v.diff` read it)."""
        if self.taps is None:
            raise ValueError("no taps: call embed(..., taps=True)")
        from .taps import save

        save(path, self.taps, {"producer": "glm5v (python)", "precision": self.precision})

    def per_image(self) -> List[Any]:
        """The embeddings split by input."""
        return [self.embeddings[s.rows] for s in self.spans]


class Embedder:
    """``Embedder(model_dir, backend="cpu", precision=None, threads=None, **options)``.

    Loads ``config.json`` + ``model.safetensors`` (or an index with shards, BF16/F16/F32) from
    ``model_dir``, and the image processor's options from its ``preprocessor_config.json``
    (``options`` override them, as for :class:`ImageProcessor`).

    - ``backend``: "cpu" (the oracle), or "gpu" (CUDA device 0; only in wheels built with the
      ``gpu`` cargo feature, see :meth:`has_gpu`).
    - ``precision``: on the CPU "f32" (upstream's, the default), "f64" (the tighter oracle) or
      "bf16" (the GPU's policy: bf16 weights and product inputs, f32 accumulation); on the GPU
      "bf16" (the default) or "f32".
    - ``threads``: a pool of that many threads owned by the embedder, else glm5v's shared pool.

    Forwards release the GIL; one embedder may be shared between threads. With ``threads=None``
    it also works in a child forked after it was made (the shared pool is rebuilt there); an
    embedder with its own pool, or on the GPU, does not survive a fork: make it in the child.
    """

    def __init__(
        self,
        model_dir: PathLike,
        backend: str = "cpu",
        precision: Optional[str] = None,
        threads: Optional[int] = None,
        **options: Any,
    ) -> None:
        if precision is None:
            precision = "bf16" if backend == "gpu" else "f32"
        self.model_dir = os.fspath(model_dir)
        self.backend = backend
        self._core = _glm5v.Embed(self.model_dir, precision, threads, options, backend)
        self.out_hidden_size, self.merge_size, self.depth = self._core.dims()

    @staticmethod
    def has_gpu() -> bool:
        """Whether this build has the CUDA backend (the ``gpu`` cargo feature)."""
        return _glm5v.Embed.has_gpu()

    def describe(self) -> str:
        """The tower and backend in words."""
        return self._core.describe()

    @property
    def precision(self) -> str:
        return self._core.precision

    @property
    def warnings(self) -> List[str]:
        """Load-time warnings (non-finite weights), each naming its tensor."""
        return self._core.warnings()

    def __repr__(self) -> str:
        return (
            f"Embedder({self.model_dir!r}, backend={self.backend!r}, precision={self.precision!r}, "
            f"depth={self.depth}, out_hidden_size={self.out_hidden_size})"
        )

    def _result(self, out: Any, return_tensors: Optional[str], pixel_values: Any = None) -> EmbedResult:
        emb, spans, taps = out
        grids = np.array([s[0] for s in spans], dtype=np.int64).reshape(-1, 3)
        if return_tensors == "pt":
            import torch

            emb, grids = torch.from_numpy(emb), torch.from_numpy(grids)
        elif return_tensors not in (None, "np"):
            raise ValueError(f'return_tensors must be "np", "pt" or None, got {return_tensors!r}')
        tap_dict = None
        if taps:
            tap_dict = dict(taps)
            tap_dict["image_grid_thw"] = np.asarray(grids, dtype=np.int64).reshape(-1, 3)
            if pixel_values is not None:
                tap_dict.setdefault("pixel_values", pixel_values)
        return EmbedResult(
            embeddings=emb,
            spans=[ImageSpan(tuple(g), o, c, p) for g, o, c, p in spans],
            image_grid_thw=grids,
            taps=tap_dict,
            precision=self.precision,
        )

    def embed(self, images: Any, return_tensors: Optional[str] = "np", taps: bool = False) -> EmbedResult:
        """``images`` (one or a list, any input :class:`ImageProcessor` takes) through the
        processor and the tower as one packed batch. ``taps=True`` also keeps every tap of the
        forward (the tap-dump layout, comparable with :func:`glm5v.diff`)."""
        if return_tensors not in (None, "np", "pt"):
            raise ValueError(f'return_tensors must be "np", "pt" or None, got {return_tensors!r}')
        return self._result(self._core.embed(to_items(images), taps), return_tensors)

    __call__ = embed

    def embed_pixels(
        self, pixel_values: Any, image_grid_thw: Any, return_tensors: Optional[str] = "np", taps: bool = False
    ) -> EmbedResult:
        """A batch an image processor made (``pixel_values`` ``[N, 1176]``, ``image_grid_thw``
        ``[I, 3]``; numpy or torch) through the tower."""
        pv = np.ascontiguousarray(_to_numpy(pixel_values), dtype=np.float32)
        grids = [tuple(int(v) for v in g) for g in np.asarray(_to_numpy(image_grid_thw)).reshape(-1, 3)]
        return self._result(self._core.embed_pixels(pv, grids, taps), return_tensors, pv if taps else None)


def _to_numpy(x: Any) -> Any:
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().numpy()
    return x
