"""Turning the images a caller hands over into the tagged tuples the Rust core takes.

What each kind of input means, as upstream's ``Glm5NextImageProcessor`` treats it:

- ``str`` / ``os.PathLike``: a file, decoded as ``transformers.image_utils.load_image(path)``
  does (PIL's decoders and mode rules, EXIF orientation, ``convert("RGB")``); a ``str`` that
  starts with ``data:`` is a data URI (base64 after the comma).
- ``bytes`` / ``bytearray`` / ``memoryview``: an encoded file held in memory, as a path.
- a ``PIL.Image.Image``: no file is decoded. Upstream's processor applies its ``convert_to_rgb``:
  with an alpha band or ``info["transparency"]``, ``convert("RGBA")`` then an alpha composite over
  opaque white, else ``convert("RGB")``. Those exact PIL calls are made here (PIL's own mode rules,
  so the result is PIL's); an RGB image without transparency is taken as it is. No EXIF rotation.
- a ``numpy.ndarray`` of ``uint8``: ``HxWxC`` or ``CxHxW`` with C in 1, 3, the layout inferred
  with upstream's rule (the first axis is the channel axis when its size is 1, 3 or 4, else the
  last: a ``1xWx3`` array is read as one channel of W rows and 3 columns, as upstream reads it). One channel is repeated to three, as upstream does. Four channels
  (upstream blends them over white in float) and other dtypes are refused with a clear error.
- a ``torch.Tensor`` (uint8): taken as the numpy array of its values.
"""

import os
from typing import Any, List, Sequence, Tuple

import numpy as np

from ._errors import DecodeError

Item = Tuple[Any, ...]

_CHANNELS = (1, 3, 4)


def _is_pil(x: Any) -> bool:
    mod = type(x).__module__
    if not mod.startswith("PIL"):
        return False
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - a PIL object without PIL
        return False
    return isinstance(x, Image.Image)


def _pil_rgb(img: Any, name: str) -> np.ndarray:
    """Upstream's ``convert_to_rgb`` on a PIL image, by PIL itself; returns HxWx3 uint8."""
    from PIL import Image

    has_alpha = "A" in img.getbands() or img.info.get("transparency") is not None
    try:
        if has_alpha:
            rgba = img.convert("RGBA")
            background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            rgb = Image.alpha_composite(background, rgba).convert("RGB")
        elif img.mode == "RGB":
            rgb = img
        else:
            rgb = img.convert("RGB")
    except (ValueError, OSError) as e:
        raise DecodeError(f"{name}: PIL cannot convert a mode {img.mode} image to RGB: {e}") from e
    arr = np.asarray(rgb)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise DecodeError(f"{name}: PIL gave {arr.dtype} {arr.shape} for an RGB image")
    return arr


def _array_rgb(arr: np.ndarray, name: str) -> np.ndarray:
    """A numpy image as upstream's torchvision backend reads it, as HxWx3 uint8."""
    if arr.dtype != np.uint8:
        raise DecodeError(
            f"{name}: pixel arrays must be uint8 (got {arr.dtype}); upstream rescales other "
            "dtypes differently, convert with care or pass the encoded file"
        )
    if arr.ndim == 3:
        if arr.shape[0] in _CHANNELS:  # upstream: channels first when the first axis fits
            arr = np.moveaxis(arr, 0, -1)
        elif arr.shape[2] not in _CHANNELS:
            raise DecodeError(
                f"{name}: cannot tell the channel axis of an array of shape {arr.shape} "
                "(upstream needs 1, 3 or 4 channels first or last)"
            )
    else:
        raise DecodeError(
            f"{name}: a pixel array must be HxWxC or CxHxW (upstream refuses other ranks), got shape {arr.shape}"
        )
    c = arr.shape[2]
    if c == 4:
        raise DecodeError(
            f"{name}: 4-channel arrays are not supported (upstream blends them over white in "
            "float32); pass a PIL RGBA image or drop the alpha channel"
        )
    if c == 1:
        arr = np.repeat(arr, 3, axis=2)
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DecodeError(f"{name}: the image has zero width or height ({arr.shape[1]}x{arr.shape[0]})")
    return np.ascontiguousarray(arr)


def one_item(x: Any, i: int) -> Item:
    """The tagged tuple of input ``i``."""
    if isinstance(x, str):
        if x.startswith("data:"):
            return ("uri", x)
        return ("path", x)
    if isinstance(x, os.PathLike):
        return ("path", os.fspath(x))
    if isinstance(x, (bytes, bytearray, memoryview)):
        return ("bytes", f"<bytes #{i}>", bytes(x))
    if _is_pil(x):
        name = f"<PIL image #{i}, mode {x.mode}>"
        if x.mode in ("RGBA", "LA"):
            # convert("RGBA") of these is their own bands: the white composite is done in Rust
            # with Pillow's arithmetic, without the GIL
            arr = np.asarray(x)
            if arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[2] == len(x.mode):
                return (x.mode.lower(), name, np.ascontiguousarray(arr))
        return ("rgb", name, _pil_rgb(x, name))
    if isinstance(x, np.ndarray):
        name = f"<array #{i}, shape {x.shape}>"
        return ("rgb", name, _array_rgb(x, name))
    if type(x).__module__.startswith("torch"):
        name = f"<tensor #{i}, shape {tuple(x.shape)}>"
        return ("rgb", name, _array_rgb(x.detach().cpu().numpy(), name))
    raise TypeError(
        f"image #{i}: expected a path, bytes, a data URI, a PIL image or a uint8 array, "
        f"got {type(x).__name__}"
    )


def is_single(images: Any) -> bool:
    return not isinstance(images, (list, tuple))


def to_items(images: Any) -> List[Item]:
    """One tagged tuple per image of ``images`` (one image or a list / tuple of them)."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)  # a batch of images, as upstream splits it
    if is_single(images):
        images = [images]
    # upstream flattens a batch of lists of images
    images = [y for x in images for y in (x if isinstance(x, (list, tuple)) else [x])]
    if len(images) == 0:
        raise ValueError("no images given")
    return [one_item(x, i) for i, x in enumerate(images)]


def flatten_videos(videos: Any) -> Sequence[Any]:
    """``videos``: one clip (a list of frames, or an FxHxWxC array) or a list of clips."""
    if isinstance(videos, np.ndarray):
        return [videos]
    if isinstance(videos, (list, tuple)) and videos and (
        isinstance(videos[0], (list, tuple)) or (isinstance(videos[0], np.ndarray) and videos[0].ndim == 4)
    ):
        return list(videos)
    return [videos]
