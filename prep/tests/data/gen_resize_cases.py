"""Generates resize_cases.json: torchvision's antialiased bicubic resize of uint8 images.

Pinned: torch 2.15.0 (CPU capability AVX512 or AVX2; both run torch's native uint8 AA kernel),
torchvision 0.29.2, numpy 2.x, Python 3.11.
Run: python prep/tests/data/gen_resize_cases.py > prep/tests/data/resize_cases.json

Inputs come from a xorshift32 generator the Rust test re-implements (`pixels(seed, n)`):
state = seed; per byte: state ^= state << 13; state ^= state >> 17; state ^= state << 5
(all mod 2^32); byte = state >> 24. Bytes fill the image in HWC order (RGB interleaved).
The call is exactly the processor's: tvF.resize(CHW uint8, [h, w], BICUBIC, antialias=True).
"""
import base64
import json

import torch
import torchvision
from torchvision.transforms.v2 import functional as tvF


def pixels(seed, n):
    s = seed & 0xFFFFFFFF
    out = bytearray(n)
    for i in range(n):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        out[i] = s >> 24
    return bytes(out)


CASES = [  # (in_h, in_w, out_h, out_w)
    (17, 23, 9, 5), (5, 7, 31, 29), (1, 300, 1, 40), (60, 1, 28, 1), (40, 30, 40, 13), (30, 40, 11, 40),
    (100, 80, 37, 53), (3, 3, 100, 2), (64, 64, 63, 65), (9, 200, 3, 7), (1, 1, 5, 4), (250, 2, 7, 1),
]
out = []
for i, (h, w, oh, ow) in enumerate(CASES):
    seed = 0x9E3779B9 ^ (i * 7919 + 1)
    data = pixels(seed, h * w * 3)
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(h, w, 3).permute(2, 0, 1).contiguous()
    r = tvF.resize(t, [oh, ow], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
    exp = r.permute(1, 2, 0).contiguous().numpy().tobytes()
    out.append({"in": [h, w], "out": [oh, ow], "seed": seed, "expected_b64": base64.b64encode(exp).decode()})
print(json.dumps({"generator": "gen_resize_cases.py", "torch": torch.__version__, "torchvision": torchvision.__version__,
                  "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cases": out}, indent=1))
