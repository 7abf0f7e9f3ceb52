"""The exceptions of :mod:`glm5v`. Each carries the Rust error's message, which names the input.

``Glm5vError`` is the base of all of them; each also derives from the builtin that fits, so
``except ValueError`` or ``except OSError`` code keeps working.
"""

__all__ = [
    "Glm5vError",
    "DecodeError",
    "DecodeBudgetError",
    "ReadError",
    "OptionsError",
    "VideoError",
    "InputError",
    "ModelError",
    "TapsError",
]


class Glm5vError(Exception):
    """Base class of every error raised by glm5v."""


class DecodeError(Glm5vError, ValueError):
    """An image could not be decoded: empty, not an image, corrupt, truncated, an unsupported
    variant, zero-sized, a bad data URI, or a PIL image / array of a kind upstream's processor
    would treat in a way glm5v does not reproduce exactly. The message names the input."""


class DecodeBudgetError(DecodeError):
    """An image's header promises more pixels than the decode budget (PIL's
    ``DecompressionBombError`` threshold, ``2 * 89_478_485``, by default); refused before decoding."""


class ReadError(DecodeError, OSError):
    """A file could not be read (missing, unreadable)."""


class OptionsError(Glm5vError, ValueError):
    """An invalid processor option, or an invalid ``preprocessor_config.json``."""


class VideoError(Glm5vError, ValueError):
    """An invalid video input: no frames, frames of different sizes, a bad fps, or a video file
    glm5v cannot read (built without the ``video`` feature, no video stream, an unknown codec, a
    corrupt or truncated file)."""


class InputError(Glm5vError, ValueError):
    """Pixels that do not fit the checkpoint (wrong patch size, rows that do not match the grids)."""


class ModelError(Glm5vError):
    """A checkpoint that cannot be loaded (missing or mis-shaped tensors, bad config.json)."""


class TapsError(Glm5vError):
    """A tap dump that cannot be read or compared."""
