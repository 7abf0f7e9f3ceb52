"""glm5v: the GLM-5.3-Flash vision tower's preprocessing and embedding, in Rust.

- :class:`ImageProcessor` / :class:`VideoProcessor`: transformers' ``Glm5NextImageProcessor`` /
  ``Glm5NextVideoProcessor`` (5.23.0, torchvision backend), the same ``pixel_values`` bytes,
  computed without the GIL.
- :class:`Embedder`: a checkpoint loaded once; images in, the embeddings that replace the
  ``<|image|>`` placeholders out (the CPU oracle, f32 or f64); :meth:`Embedder.embed_many`
  streams a corpus in bounded memory. :mod:`glm5v.ray` (not imported here): ``EmbedBatch``
  for Ray Data's ``map_batches``.
- :func:`diff`, :mod:`glm5v.testing` (``assert_taps_close``), :mod:`glm5v.taps` (``record``,
  forward hooks on a PyTorch module): tap-by-tap comparison in the tap-dump layout.

The core needs numpy only; PIL images and torch tensors are accepted when those are installed.
"""

from . import _glm5v
from ._errors import (
    DecodeBudgetError,
    DecodeError,
    Glm5vError,
    InputError,
    ModelError,
    OptionsError,
    ReadError,
    TapsError,
    VideoError,
)
from . import taps, testing
from .diff import DiffReport, TapResult, diff
from .embedder import EmbedItem, Embedder, EmbedResult, EmbedStream, ImageSpan
from .processor import (
    BEGIN_OF_IMAGE,
    BEGIN_OF_IMAGE_ID,
    BEGIN_OF_VIDEO,
    BEGIN_OF_VIDEO_ID,
    END_OF_IMAGE,
    END_OF_IMAGE_ID,
    END_OF_VIDEO,
    END_OF_VIDEO_ID,
    IMAGE_TOKEN,
    IMAGE_TOKEN_ID,
    VIDEO_TOKEN,
    VIDEO_TOKEN_ID,
    BatchFeature,
    ImageProcessor,
    VideoProcessor,
)

__version__ = _glm5v.__version__
#: Whether the JPEG decoder of this build runs libjpeg-turbo's SIMD paths (same pixels either way).
JPEG_SIMD = _glm5v.JPEG_SIMD

__all__ = [
    "ImageProcessor",
    "VideoProcessor",
    "BatchFeature",
    "Embedder",
    "EmbedResult",
    "ImageSpan",
    "EmbedItem",
    "EmbedStream",
    "diff",
    "DiffReport",
    "TapResult",
    "Glm5vError",
    "DecodeError",
    "DecodeBudgetError",
    "ReadError",
    "OptionsError",
    "VideoError",
    "InputError",
    "ModelError",
    "TapsError",
    "IMAGE_TOKEN",
    "VIDEO_TOKEN",
    "BEGIN_OF_IMAGE",
    "END_OF_IMAGE",
    "BEGIN_OF_VIDEO",
    "END_OF_VIDEO",
    "IMAGE_TOKEN_ID",
    "VIDEO_TOKEN_ID",
    "BEGIN_OF_IMAGE_ID",
    "END_OF_IMAGE_ID",
    "BEGIN_OF_VIDEO_ID",
    "END_OF_VIDEO_ID",
    "JPEG_SIMD",
]
