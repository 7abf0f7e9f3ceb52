"""Generates pixel_cases.json: upstream's image processor on small seeded images.

Pinned: transformers 5.23.0, torch 2.15.0, torchvision 0.29.2, numpy 2.x, Python 3.11.
Run: python prep/tests/data/gen_pixel_cases.py > prep/tests/data/pixel_cases.json

- `norm_lut`: `Glm5NextImageProcessor().rescale_and_normalize` applied to the 256 uint8 levels
  of each channel, as f32 bit patterns (hex).
- `images`: `Glm5NextImageProcessor()(images=HWC uint8 array, min/max_image_tokens=...)` on
  xorshift32 images (same generator as gen_resize_cases.py); the sha256 of the little-endian f32
  `pixel_values`, their shape and `image_grid_thw`. One batch of several images checks the
  concatenation order.
- `video`: `Glm5NextVideoProcessor()(videos=[T,H,W,3] uint8, video_metadata={fps, total frames})`
  with its default frame sampling.
"""
import hashlib
import json

import numpy as np
import torch
from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor
from transformers.models.glm5_next.video_processing_glm5_next import Glm5NextVideoProcessor
from transformers.video_utils import VideoMetadata


def pixels(seed, n):
    s = seed & 0xFFFFFFFF
    out = bytearray(n)
    for i in range(n):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        out[i] = s >> 24
    return bytes(out)


def img(seed, h, w):
    return np.frombuffer(pixels(seed, h * w * 3), dtype=np.uint8).reshape(h, w, 3).copy()


proc = Glm5NextImageProcessor()
levels = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 1, 256).expand(1, 3, 1, 256).contiguous()
lut = proc.rescale_and_normalize(levels, True, proc.rescale_factor, True, proc.image_mean, proc.image_std)
norm_lut = [[format(int(v), "08x") for v in lut[0, c, 0].numpy().view(np.uint32)] for c in range(3)]


def digest(pv):
    a = pv.numpy().astype("<f4")
    return hashlib.sha256(a.tobytes()).hexdigest()


IMAGES = [  # seed, h, w, min_tokens, max_tokens
    (11, 56, 84, 16, 8000),     # already aligned, no resize
    (12, 37, 53, 16, 8000),     # upscale by the min-token rule
    (13, 300, 200, 16, 64),     # downscale to fit 64 tokens
    (14, 1, 90, 16, 8000),      # sliver
    (15, 130, 90, 4, 30),
    (16, 700, 500, 16, 8000),   # pads only (content kept)
]
images = []
for seed, h, w, mn, mx in IMAGES:
    r = proc(images=img(seed, h, w), min_image_tokens=mn, max_image_tokens=mx, input_data_format="channels_last",
             return_tensors="pt")
    images.append({"seed": seed, "hw": [h, w], "min_tokens": mn, "max_tokens": mx,
                   "shape": list(r["pixel_values"].shape), "grid": r["image_grid_thw"].tolist()[0],
                   "sha256": digest(r["pixel_values"])})
batch_ids = [1, 0, 4]
r = proc(images=[img(*IMAGES[i][:3]) for i in batch_ids], min_image_tokens=16, max_image_tokens=64,
         input_data_format="channels_last", return_tensors="pt")
batch = {"images": batch_ids, "min_tokens": 16, "max_tokens": 64, "shape": list(r["pixel_values"].shape),
         "grid": r["image_grid_thw"].tolist(), "sha256": digest(r["pixel_values"])}

vproc = Glm5NextVideoProcessor()
T, H, W, FPS = 13, 45, 61, 4.0
frames = np.stack([img(100 + t, H, W) for t in range(T)])
md = VideoMetadata(total_num_frames=T, fps=FPS)
r = vproc(videos=[frames], video_metadata=[md], max_image_tokens=200, return_metadata=True,
          input_data_format="channels_last", return_tensors="pt")
video = {"seeds_from": 100, "frames": T, "hw": [H, W], "fps": FPS, "max_tokens": 200,
         "indices": [int(i) for i in r["video_metadata"][0].frames_indices],
         "timestamps": [float(t) for t in r["video_metadata"][0].timestamps],
         "shape": list(r["pixel_values_videos"].shape), "grid": r["video_grid_thw"].tolist()[0],
         "sha256": digest(r["pixel_values_videos"])}

print(json.dumps({"generator": "gen_pixel_cases.py", "norm_lut": norm_lut, "images": images, "batch": batch,
                  "video": video}, indent=1))
