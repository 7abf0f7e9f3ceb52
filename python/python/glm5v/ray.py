"""Ray Data batch inference: :class:`EmbedBatch`, a callable class for ``map_batches``.

``import glm5v`` does not import this module (nor ray); it needs pyarrow (which Ray Data
depends on) and not ray itself::

    import ray
    from glm5v.ray import EmbedBatch

    ds = ray.data.read_binary_files(paths, include_paths=True)       # bytes in: exact decoding
    ds = ds.map_batches(EmbedBatch, fn_constructor_args=("/models/glm",),
                        fn_constructor_kwargs={"backend": "gpu"}, num_gpus=1,
                        concurrency=4, batch_size=64)
    ds.write_parquet("embeddings.parquet")

(``ray.data.read_images`` decodes with PIL into arrays: the file bytes, and with them upstream's
exact decoding and the header pricing, are lost; read the bytes.)
"""

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._errors import ModelError, OptionsError
from .embedder import Embedder, _Named

#: The columns :meth:`EmbedBatch.__call__` returns, in order: the same names and types as the
#: Parquet datasets ``glm5v embed --out NAME.parquet`` writes.
COLUMNS = ("input", "status", "error", "grid_thw", "tokens", "shape", "embedding")

_DTYPES = ("f32", "bf16")


def bf16_bytes(a: np.ndarray) -> bytes:
    """float32 values as little-endian bfloat16 bytes, rounded to nearest even (as
    ``torch.Tensor.to(torch.bfloat16)`` and the ``half`` crate round); NaNs stay NaNs."""
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(a)
    if nan.any():
        rounded = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x0040), rounded)
    return rounded.astype("<u2").tobytes()


def _column(batch: Any, name: str) -> Optional[List[Any]]:
    """Column ``name`` of a batch as a list: dict of numpy arrays / lists (``batch_format``
    "numpy", "default"), pandas DataFrame ("pandas") or pyarrow Table ("pyarrow")."""
    if hasattr(batch, "column_names") and hasattr(batch, "column"):  # pyarrow.Table
        if name not in batch.column_names:
            return None
        return batch.column(name).to_pylist()
    try:
        col = batch[name]
    except (KeyError, IndexError):
        return None
    return list(col)


class EmbedBatch:
    """``EmbedBatch(model_dir, precision=None, backend="cpu", batch_tokens=None,
    out_dtype="f32", threads=None, decode_threads=2, **options)``: loads the model once (per
    Ray actor) and embeds each batch.

    - ``backend="gpu"``: the first visible GPU (CUDA device 0, i.e. the first of the
      ``CUDA_VISIBLE_DEVICES`` Ray gives the actor: pass ``num_gpus=1`` to ``map_batches``).
    - ``batch_tokens``: the most merged tokens in one forward (:meth:`glm5v.Embedder.embed_many`).
    - ``out_dtype``: the ``embedding`` bytes' type, "f32" (default) or "bf16".
    - ``threads``: the CPU forward's threads (default: every core; several actors on one
      machine want ``threads=cores // actors``). ``options``: the image processor's.

    ``model_dir`` is opened on the actor's machine: give an absolute path there.
    """

    def __init__(
        self,
        model_dir: Any,
        precision: Optional[str] = None,
        backend: str = "cpu",
        batch_tokens: Optional[int] = None,
        out_dtype: str = "f32",
        threads: Optional[int] = None,
        decode_threads: int = 2,
        **options: Any,
    ) -> None:
        if out_dtype not in _DTYPES:
            raise OptionsError(f'out_dtype must be "f32" or "bf16", got {out_dtype!r}')
        if backend == "gpu" and os.environ.get("CUDA_VISIBLE_DEVICES") == "":
            raise ModelError(
                "backend gpu: no GPU is visible to this process (CUDA_VISIBLE_DEVICES is empty): "
                "pass num_gpus=1 to map_batches"
            )
        import pyarrow  # noqa: F401  (fail here, once, rather than on every batch)

        self.embedder = Embedder(model_dir, backend=backend, precision=precision, threads=threads, **options)
        self.batch_tokens = batch_tokens
        self.decode_threads = decode_threads
        self.out_dtype = out_dtype

    def __repr__(self) -> str:
        return f"EmbedBatch({self.embedder!r}, batch_tokens={self.batch_tokens}, out_dtype={self.out_dtype!r})"

    def __call__(self, batch: Any) -> Dict[str, Any]:
        """``batch``: ``bytes`` and ``path`` columns (``read_binary_files(...,
        include_paths=True)``), as a dict of arrays or lists, a pandas DataFrame or a pyarrow
        Table. Returns a dict of pyarrow arrays, one row per input in order: ``input``
        (string: the path), ``status`` ("ok" | "error"), ``error`` (string, null when ok),
        ``grid_thw`` (list<int32> of 3), ``tokens`` (int32), ``shape`` (list<int32>:
        ``[tokens, out_hidden_size]``), ``embedding`` (binary: little-endian row-major
        ``out_dtype``). On error the last four are null. A bad input is an error row, never an
        exception."""
        import pyarrow as pa

        data = _column(batch, "bytes")
        if data is None:
            raise ValueError(
                "EmbedBatch needs a `bytes` column (ray.data.read_binary_files(paths, "
                "include_paths=True)); read_images decodes with PIL and loses the file bytes"
            )
        paths = _column(batch, "path")
        if paths is None:
            paths = [f"<row {i}>" for i in range(len(data))]
        if len(paths) != len(data):
            raise ValueError(f"{len(paths)} paths for {len(data)} byte strings")
        named = [_Named(str(p), b) for p, b in zip(paths, data)]
        rows = self.embedder.embed_many(named, self.batch_tokens, self.decode_threads)
        cols: Tuple[List[Any], ...] = ([], [], [], [], [], [], [])
        inputs, status, error, grid, tokens, shape, emb = cols
        for r in rows:
            inputs.append(r.input)
            status.append(r.status)
            error.append(r.error)
            if r.ok:
                grid.append(list(r.grid_thw))
                tokens.append(r.tokens)
                shape.append(list(r.embedding.shape))
                emb.append(self._bytes(r.embedding))
            else:
                grid.append(None)
                tokens.append(None)
                shape.append(None)
                emb.append(None)
        i32s = pa.list_(pa.int32())
        return {
            "input": pa.array(inputs, pa.string()),
            "status": pa.array(status, pa.string()),
            "error": pa.array(error, pa.string()),
            "grid_thw": pa.array(grid, i32s),
            "tokens": pa.array(tokens, pa.int32()),
            "shape": pa.array(shape, i32s),
            "embedding": pa.array(emb, pa.binary()),
        }

    def _bytes(self, a: np.ndarray) -> bytes:
        if self.out_dtype == "bf16":
            return bf16_bytes(a)
        return np.ascontiguousarray(a, dtype="<f4").tobytes()


def decode_embedding(row: Dict[str, Any], dtype: str = "f32") -> np.ndarray:
    """A row's ``embedding`` bytes back as float32 ``[tokens, out_hidden_size]`` (``dtype``:
    what ``out_dtype`` was)."""
    shape: Sequence[int] = row["shape"]
    raw = row["embedding"]
    if dtype == "bf16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32).reshape(tuple(shape))
    if dtype != "f32":
        raise OptionsError(f'dtype must be "f32" or "bf16", got {dtype!r}')
    return np.frombuffer(raw, dtype="<f4").reshape(tuple(shape))
