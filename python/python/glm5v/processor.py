"""``ImageProcessor`` and ``VideoProcessor``: upstream's ``Glm5NextImageProcessor`` /
``Glm5NextVideoProcessor`` call surface, computed by the Rust core with the GIL released."""

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _glm5v
from ._inputs import flatten_videos, to_items

PathLike = Union[str, "os.PathLike[str]"]

IMAGE_TOKEN = "<|image|>"
VIDEO_TOKEN = "<|video|>"
BEGIN_OF_IMAGE = "<|begin_of_image|>"
END_OF_IMAGE = "<|end_of_image|>"
BEGIN_OF_VIDEO = "<|begin_of_video|>"
END_OF_VIDEO = "<|end_of_video|>"
IMAGE_TOKEN_ID = 154854
VIDEO_TOKEN_ID = 154855
BEGIN_OF_IMAGE_ID = 154830
END_OF_IMAGE_ID = 154831
BEGIN_OF_VIDEO_ID = 154832
END_OF_VIDEO_ID = 154833


class BatchFeature(dict):
    """The processor's output: a ``dict`` whose keys also read as attributes
    (``out.pixel_values``), like transformers' ``BatchFeature``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        parts = []
        for k, v in self.items():
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                parts.append(f"{k}: {type(v).__module__.split('.')[0]} {v.dtype} {tuple(v.shape)}")
            else:
                parts.append(f"{k}: {v!r}")
        return "BatchFeature(" + ", ".join(parts) + ")"


def _tensors(arrays: Dict[str, Any], return_tensors: Optional[str]) -> BatchFeature:
    if return_tensors in (None, "np"):
        return BatchFeature(arrays)
    if return_tensors == "pt":
        import torch  # optional dependency

        return BatchFeature(
            {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
        )
    raise ValueError(f'return_tensors must be "np", "pt" or None, got {return_tensors!r}')


def _grids(image_grid_thw: Any) -> List[Tuple[int, int, int]]:
    g = np.asarray(image_grid_thw, dtype=np.int64).reshape(-1, 3)
    return [(int(a), int(b), int(c)) for a, b, c in g]


def _restore(cls: type, model_dir: Optional[str], kwargs: Dict[str, Any]) -> Any:
    """Unpickling: the processor made again from its model directory and keywords."""
    return cls(model_dir, **kwargs)


class _Base:
    _video = False

    def __init__(self, model_dir: Optional[PathLike] = None, **kwargs: Any) -> None:
        d = os.fspath(model_dir) if model_dir is not None else None
        self._core = _glm5v.Prep(d, kwargs, self._video)
        self._opts: Dict[str, Any] = json.loads(self._core.options_json())
        # what unpickling makes it again from: the model directory (read again then) and the
        # keywords given
        self._args = (os.path.abspath(d) if d is not None else None, dict(kwargs))

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_restore, (type(self), self._args[0], dict(self._args[1])))

    @classmethod
    def from_pretrained(cls, model_dir: PathLike, **kwargs: Any):
        """Reads ``preprocessor_config.json`` (``video_preprocessor_config.json`` for videos)
        from the local model directory ``model_dir``; keywords override what it says."""
        if not os.path.isdir(os.fspath(model_dir)):
            from ._errors import OptionsError

            raise OptionsError(f"{os.fspath(model_dir)}: not a directory (from_pretrained reads local model directories only)")
        return cls(model_dir, **kwargs)

    def to_dict(self) -> Dict[str, Any]:
        """The options in force, under upstream's names."""
        return dict(self._opts)

    def __getattr__(self, name: str) -> Any:
        opts = self.__dict__.get("_opts")
        if opts is not None and name in opts:
            return opts[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._opts.items())
        return f"{type(self).__name__}({body})"


class ImageProcessor(_Base):
    """Upstream's ``Glm5NextImageProcessor`` (torchvision backend), bit for bit.

    ``ImageProcessor(**options)`` or ``ImageProcessor.from_pretrained(model_dir, **options)``.
    Options, under upstream's names: ``min_image_tokens`` (16), ``max_image_tokens`` (8000),
    ``patch_size`` (14), ``temporal_patch_size`` (2), ``merge_size`` (2), ``patch_expand_factor``
    (1), ``image_mean`` / ``image_std`` (OpenAI CLIP), ``do_rescale``, ``rescale_factor``,
    ``do_normalize``; ``do_resize`` must stay True and ``resample`` 3 (bicubic). Ours:
    ``alpha`` ("drop", as ``load_image`` files are; "white": decoded files composited over
    white, as upstream does for ``PIL.Image.open(path)``) and ``max_pixels`` (decode budget).

    Calls release the GIL and use the Rust thread pool for several images; one processor can
    be shared by any number of Python threads, and used in a child forked after it was made
    (the pool is rebuilt in the child; its size is ``RAYON_NUM_THREADS``, else one per core).
    Picklable: unpickling reads the model directory again (its absolute path) with the same
    keywords.

    >>> proc = ImageProcessor()
    >>> out = proc(images=["a.jpg", open("b.png", "rb").read()], return_tensors="np")
    >>> out["pixel_values"].shape, out["image_grid_thw"]            # doctest: +SKIP
    ((N, 1176), array([[1, gh, gw], ...]))
    """

    def __call__(
        self,
        images: Any = None,
        return_tensors: Optional[str] = "np",
        **kwargs: Any,
    ) -> BatchFeature:
        """``images``: one image or a list (paths, bytes, data URIs, PIL images, uint8 arrays);
        returns ``pixel_values`` float32 ``[N, 1176]`` and ``image_grid_thw`` int64 ``[I, 3]``
        (numpy, or torch with ``return_tensors="pt"``). Keyword options apply to this call only."""
        if images is None:
            raise ValueError("images is required")
        core = self._core if not kwargs else _glm5v.Prep(None, {**self._opts, **kwargs}, False)
        pv, grid = core.images(to_items(images))
        return _tensors({"pixel_values": pv, "image_grid_thw": grid}, return_tensors)

    preprocess = __call__

    def plan(self, images: Any) -> List[Dict[str, Any]]:
        """Per image, from its header alone (no pixels decoded): ``width``, ``height`` (after
        EXIF orientation), ``canvas_height`` / ``canvas_width``, ``content_height`` /
        ``content_width``, ``grid_thw``, ``patches`` and ``tokens`` (the ``<|image|>`` count)."""
        return json.loads(self._core.plan(to_items(images)))

    def num_image_tokens(self, image_grid_thw: Any) -> List[int]:
        """``t*h*w / merge_size**2`` per grid row."""
        m = self._opts["merge_size"]
        return [t * h * w // (m * m) for t, h, w in _grids(image_grid_thw)]

    def expand_prompt(self, text: str, image_grid_thw: Any) -> str:
        """``text`` with each ``<|image|>`` replaced by its image's ``<|image|>`` run, in order
        (what ``Glm5NextProcessor`` does before tokenising). The counts must match."""
        return _glm5v.expand_prompt(text, _grids(image_grid_thw), [], self._opts["merge_size"])

    def image_prompt(self, grid_thw: Sequence[int]) -> str:
        """``<|begin_of_image|>`` + ``<|image|>`` x tokens + ``<|end_of_image|>`` for one grid."""
        (g,) = _grids(grid_thw)
        return _glm5v.image_block_text(g, self._opts["merge_size"])

    def image_prompt_ids(self, grid_thw: Sequence[int]) -> List[int]:
        """:meth:`image_prompt` as token ids (154830, 154854 x tokens, 154831)."""
        (g,) = _grids(grid_thw)
        return _glm5v.image_block_ids(g, self._opts["merge_size"])


class VideoProcessor(_Base):
    """Upstream's ``Glm5NextVideoProcessor`` on decoded clips given as frames.

    Options as :class:`ImageProcessor` (the video processor's own: ``max_image_tokens`` 240000
    by default) plus ``fps`` (2, the sampling target), ``max_frames`` (2048) and
    ``do_sample_frames`` (True).
    """

    _video = True

    def __call__(
        self,
        videos: Any = None,
        clip_fps: Union[float, Sequence[float], None] = None,
        video_metadata: Any = None,
        return_tensors: Optional[str] = "np",
        **kwargs: Any,
    ) -> BatchFeature:
        """``videos``: one clip or a list of clips; a clip is a list of frames (any image input)
        or an ``FxHxWx3`` uint8 array holding all its frames, decoded at ``clip_fps`` frames per
        second (one value or one per clip; or ``video_metadata``, objects or dicts with ``fps``,
        as upstream's ``VideoMetadata``). Frames are sampled to the ``fps`` option (2) as upstream
        samples them. Returns ``pixel_values_videos`` float32, ``video_grid_thw`` int64
        ``[V, 3]``, and per clip the sampled ``frame_indices`` and ``timestamps`` (lists)."""
        if videos is None:
            raise ValueError("videos is required")
        clips = flatten_videos(videos)
        if clip_fps is None and video_metadata is not None:
            metas = video_metadata if isinstance(video_metadata, (list, tuple)) else [video_metadata]
            clip_fps = [m["fps"] if isinstance(m, dict) else m.fps for m in metas]
        if clip_fps is None:
            raise ValueError("clip_fps (or video_metadata): the frame rate the frames were decoded at is required")
        rates = list(clip_fps) if isinstance(clip_fps, (list, tuple)) else [clip_fps] * len(clips)
        if len(rates) != len(clips):
            raise ValueError(f"{len(rates)} fps values for {len(clips)} videos")
        core = self._core if not kwargs else _glm5v.Prep(None, {**self._opts, **kwargs}, True)
        values, grids, indices, stamps = [], [], [], []
        for clip, r in zip(clips, rates):
            frames = list(clip) if isinstance(clip, np.ndarray) else clip
            pv, g, idx, ts = core.video(to_items(frames), float(r))
            values.append(pv)
            grids.append(g)
            indices.append(idx)
            stamps.append(ts)
        pv = values[0] if len(values) == 1 else np.concatenate(values)
        out = _tensors(
            {"pixel_values_videos": pv, "video_grid_thw": np.concatenate(grids)}, return_tensors
        )
        out["frame_indices"] = indices
        out["timestamps"] = stamps
        return out

    preprocess = __call__

    def expand_prompt(self, text: str, video_grid_thw: Any, timestamps: Sequence[Sequence[float]]) -> str:
        """``text`` with each ``<|video|>`` replaced by its clip's frame-pair blocks and
        ``"{seconds:.1f} seconds"`` captions (``timestamps`` as returned by the call)."""
        grids = _grids(video_grid_thw)
        if len(grids) != len(timestamps):
            raise ValueError(f"{len(grids)} grids for {len(timestamps)} timestamp lists")
        vids = [(g, [float(t) for t in ts]) for g, ts in zip(grids, timestamps)]
        return _glm5v.expand_prompt(text, [], vids, self._opts["merge_size"])
