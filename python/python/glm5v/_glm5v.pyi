"""Type stubs of the extension module (the Rust core). Use the public API of :mod:`glm5v`."""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
JPEG_SIMD: bool

# An input as glm5v._inputs builds it: ("path", str) | ("uri", str) | ("bytes", name, bytes)
# | ("rgb", name, uint8 array [h, w, 3]).
Item = Tuple[Any, ...]
Grid = Tuple[int, int, int]
Span = Tuple[Grid, int, int, str]
HeldTaps = Tuple[List[Tuple[str, str, List[int], bytes]], Dict[str, str]]

class Prep:
    def __init__(
        self, model_dir: Optional[str] = None, options: Optional[Mapping[str, Any]] = None, video: bool = False
    ) -> None: ...
    def options_json(self) -> str: ...
    def images(self, items: Sequence[Item]) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
    def plan(self, items: Sequence[Item]) -> str: ...
    def video(
        self, items: Sequence[Item], fps: float
    ) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], List[int], List[float]]: ...

class Embed:
    def __init__(
        self,
        model_dir: str,
        precision: str = "f32",
        threads: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        backend: str = "cpu",
    ) -> None: ...
    @property
    def precision(self) -> str: ...
    @staticmethod
    def has_gpu() -> bool: ...
    def describe(self) -> str: ...
    def config_repr(self) -> str: ...
    def dims(self) -> Tuple[int, int, int]: ...
    def warnings(self) -> List[str]: ...
    def options_json(self) -> str: ...
    def embed(
        self, items: Sequence[Item], taps: bool = False
    ) -> Tuple[npt.NDArray[np.float32], List[Span], List[Tuple[str, npt.NDArray[np.float32]]]]: ...
    def embed_pixels(
        self, pixel_values: npt.NDArray[np.float32], grid_thw: Sequence[Grid], taps: bool = False
    ) -> Tuple[npt.NDArray[np.float32], List[Span], List[Tuple[str, npt.NDArray[np.float32]]]]: ...
    def embed_many(
        self, items: Iterable[StreamItem], batch_tokens: int, decode_threads: int = 2, window_items: int = 256
    ) -> EmbedStream: ...

# What embed_many's input iterable yields (glm5v.embedder._stream_items): ("path" | "uri", name,
# str) | ("bytes", name, bytes) | ("error", name, message).
StreamItem = Tuple[str, str, Any]

class EmbedStream:
    """Per input, in input order: (index, input name, grid or None, float32 [tokens, hidden]
    or None, error message or None, inputs in its forward or None). Raises what the input
    iterable raised, after the results before it."""

    def __iter__(self) -> EmbedStream: ...
    def __next__(
        self,
    ) -> Tuple[int, str, Optional[Grid], Optional[npt.NDArray[np.float32]], Optional[str], Optional[int]]: ...
    def close(self) -> None: ...

def expand_prompt(
    text: str, image_grids: Sequence[Grid], videos: Sequence[Tuple[Grid, Sequence[float]]], merge_size: int
) -> str: ...
def image_block_ids(grid: Grid, merge_size: int) -> List[int]: ...
def image_block_text(grid: Grid, merge_size: int) -> str: ...
def diff(
    a: Union[str, HeldTaps],
    b: Union[str, HeldTaps],
    tolerance: Optional[str] = None,
    rtol: Optional[float] = None,
    label_a: Optional[str] = None,
    label_b: Optional[str] = None,
) -> Tuple[str, str]: ...
def tolerance_presets() -> List[Tuple[str, str]]: ...
def tap_names(depth: int) -> List[str]: ...
