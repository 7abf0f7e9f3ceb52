"""``Embedder``: a GLM-5.3-Flash vision checkpoint loaded once; images in, embeddings out."""

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

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


@dataclass(frozen=True, repr=False, eq=False)
class EmbedItem:
    """One input's result in :meth:`Embedder.embed_many`: embeddings, or why there are none.
    (Compared by identity: the embeddings are an array.)"""

    #: Its place in the input order (0-based).
    index: int
    #: The input as given: a path (``os.fspath`` of a path-like), a data URI, or
    #: ``"<bytes #i>"`` for bytes (``i`` = :attr:`index`).
    input: str
    #: ``"ok"`` or ``"error"``.
    status: str
    #: Why it failed (the message the matching exception would carry), ``None`` when ok.
    error: Optional[str]
    #: ``(t, h, w)`` in patches, ``None`` on error.
    grid_thw: Optional[Tuple[int, int, int]]
    #: Merged tokens (rows of :attr:`embedding`), ``None`` on error.
    tokens: Optional[int]
    #: float32 ``[tokens, out_hidden_size]``, ``None`` on error.
    embedding: Optional[np.ndarray]
    #: Inputs in the forward it ran in (itself included), ``None`` on error: a measure of how
    #: ``batch_tokens`` packs.
    batch_items: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __repr__(self) -> str:
        name = self.input if len(self.input) <= 60 else self.input[:45] + "..." + self.input[-12:]
        if self.ok:
            shape = "x".join(str(d) for d in self.embedding.shape)
            return (
                f"EmbedItem(#{self.index} {name!r}: ok, grid_thw={self.grid_thw}, "
                f"tokens={self.tokens}, embedding=float32[{shape}])"
            )
        return f"EmbedItem(#{self.index} {name!r}: error: {self.error})"


class EmbedStream:
    """The iterator :meth:`Embedder.embed_many` returns: one :class:`EmbedItem` per input, in
    input order. :meth:`close` (or leaving a ``with`` block) stops it early; the inputs still
    in flight finish in the background and are dropped."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def __iter__(self) -> "EmbedStream":
        return self

    def __next__(self) -> EmbedItem:
        index, name, grid, emb, error, batch_items = next(self._core)
        if error is None:
            return EmbedItem(index, name, "ok", None, tuple(grid), int(emb.shape[0]), emb, batch_items)
        return EmbedItem(index, name, "error", error, None, None, None)

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> "EmbedStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _stream_items(inputs: Iterable[Any]) -> Iterator[Tuple[str, str, Any]]:
    """The tagged tuples the stream's worker pulls (from its own thread, with the GIL):
    ``("path" | "uri", name, str)``, ``("bytes", name, bytes)``, or ``("error", name, message)``
    for an input ``embed_many`` does not take (it becomes that input's error result). A
    ``(name, bytes)`` pair is bytes named ``name`` (what :class:`glm5v.ray.EmbedBatch` passes)."""
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            yield ("uri" if x.startswith("data:") else "path", x, x)
        elif isinstance(x, os.PathLike):
            p = os.fsdecode(os.fspath(x))
            yield ("path", p, p)
        elif isinstance(x, (bytes, bytearray, memoryview)):
            yield ("bytes", f"<bytes #{i}>", bytes(x))
        elif isinstance(x, _Named):
            if isinstance(x.data, (bytes, bytearray, memoryview)):
                yield ("bytes", x.name, bytes(x.data))
            else:
                yield ("error", x.name, f"{x.name}: no file bytes (got {type(x.data).__name__})")
        else:
            name = f"<{type(x).__name__} #{i}>"
            yield (
                "error",
                name,
                f"{name}: embed_many takes paths, bytes or data URIs "
                f"(decoded images and arrays: use Embedder.embed)",
            )


class _Named:
    """Encoded bytes with the name results and messages give them."""

    __slots__ = ("name", "data")

    def __init__(self, name: str, data: Any) -> None:
        self.name = name
        self.data = data


def _restore(cls: type, kwargs: Dict[str, Any]) -> Any:
    """Unpickling: the object made again from its constructor arguments."""
    return cls(**kwargs)


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

    Picklable: unpickling loads the model directory again (its absolute path) with the same
    backend, precision, threads and options (what Ray, ``multiprocessing``'s spawn and
    ``concurrent.futures`` do with it).
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
        self._args: Dict[str, Any] = dict(
            model_dir=os.path.abspath(self.model_dir),
            backend=backend,
            precision=precision,
            threads=threads,
            **options,
        )
        self._core = _glm5v.Embed(self.model_dir, precision, threads, options, backend)
        self.out_hidden_size, self.merge_size, self.depth = self._core.dims()
        self._max_image_tokens = int(json.loads(self._core.options_json())["max_image_tokens"])

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_restore, (type(self), dict(self._args)))

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

    def embed_many(
        self,
        inputs: Iterable[Any],
        batch_tokens: Optional[int] = None,
        decode_threads: int = 2,
        max_in_flight: int = 256,
    ) -> EmbedStream:
        """Embeds any number of inputs (paths, ``os.PathLike``, bytes, data URIs; any iterable,
        a generator included, pulled lazily) and yields one :class:`EmbedItem` per input, in
        input order, as forwards complete.

        Inputs are priced from their headers, decoded on ``decode_threads`` threads of their own
        while the tower runs, and packed into forwards of at most ``batch_tokens`` merged tokens
        (default: 8192 on the CPU, 16384 on the GPU, raised to ``max_image_tokens`` so that no
        image is refused). Memory is bounded: at most ``4 * batch_tokens`` tokens and
        ``max_in_flight`` inputs are held at once, whatever the number of inputs. A bad input
        (unreadable, empty, corrupt, priced over ``batch_tokens``, of another kind) is an error
        result in its place, not an exception; an exception raised by ``inputs`` itself is
        raised after the results before it. The GIL is released while waiting.

        Each input's rows are the same bits as :meth:`embed` of that input alone (the CPU
        forward is batch-invariant)."""
        if batch_tokens is None:
            batch_tokens = max(16384 if self.backend == "gpu" else 8192, self._max_image_tokens)
        core = self._core.embed_many(
            _stream_items(iter(inputs)), int(batch_tokens), int(decode_threads), int(max_in_flight)
        )
        return EmbedStream(core)

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
