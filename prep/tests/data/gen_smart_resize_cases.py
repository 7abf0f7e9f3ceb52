"""Generates smart_resize_cases.json with upstream's own code.

Pinned: transformers 5.23.0, torch 2.15.0, torchvision 0.29.2, Python 3.11.
Run: python prep/tests/data/gen_smart_resize_cases.py > prep/tests/data/smart_resize_cases.json

For each case it records upstream's `smart_resize` (image and video modules carry the same
function; both are called and must agree) and the content size the processors' `resize`
methods choose, captured by running the real `resize` method with the tensor resize and pad
replaced by recorders (so huge sizes need no memory).
"""
import json
import random
import types

import torch
from transformers.image_processing_backends import TorchvisionBackend
from transformers.models.glm5_next import image_processing_glm5_next as ipm
from transformers.models.glm5_next import video_processing_glm5_next as vpm

calls = {}


def fake_resize(self, images, size, resample=None, **kw):
    calls["content"] = (size.height, size.width)
    return images


def fake_pad(images, padding, fill=0):
    calls["pad"] = padding
    return images


fake_tvF = types.SimpleNamespace(pad=fake_pad)
TorchvisionBackend.resize = fake_resize
ipm.tvF = fake_tvF
vpm.tvF = fake_tvF
image_proc = ipm.Glm5NextImageProcessor()
video_proc = vpm.Glm5NextVideoProcessor()


def content_of(num_frames, h, w, min_t, max_t, video):
    calls.clear()
    if video:
        x = torch.zeros(1, 1, 1, 1, 1, dtype=torch.uint8).expand(1, num_frames, 3, h, w)
        video_proc.resize(x, resample=None, factor=28, temporal_factor=2, min_image_tokens=min_t, max_image_tokens=max_t)
    else:
        x = torch.zeros(1, 1, 1, 1, dtype=torch.uint8).expand(1, 3, h, w)
        image_proc.resize(x, resample=None, factor=28, temporal_factor=2, min_image_tokens=min_t, max_image_tokens=max_t)
    content = calls.get("content", (h, w))
    _, _, pw, ph = calls["pad"]
    return list(content), [content[0] + ph, content[1] + pw]


rng = random.Random(20261129)
dims = []
for h in [1, 2, 3, 7, 13, 27, 28, 29, 55, 56, 57]:
    for w in [1, 5, 28, 29, 100]:
        dims.append((h, w))
dims += [(1, 60000), (60000, 1), (1, 300), (300, 1), (2, 100000), (3, 10000), (10000, 3), (1, 1000000),
         (4000, 3000), (3000, 4000), (1080, 1920), (1920, 1080), (768, 1024), (512, 512), (224, 224),
         (2166, 2888), (20000, 15000), (13000, 13000), (100000, 1700), (1700, 100000), (8192, 8192), (333, 7777)]
while len(dims) < 150:
    k = rng.randint(0, 2)
    if k == 0:
        dims.append((rng.randint(1, 200), rng.randint(1, 200)))
    elif k == 1:
        dims.append((rng.randint(200, 6000), rng.randint(200, 6000)))
    else:
        dims.append((rng.randint(1, 20), rng.randint(1000, 90000)))

budgets = [(2, 16, 8000, False)]
cases = []
for (h, w) in dims:
    cases.append((2, h, w, 16, 8000, False))
for (h, w) in rng.sample(dims, 30):
    cases.append((2, h, w, rng.choice([1, 4, 64, 256]), rng.choice([16, 64, 1024, 20000]), False))
for (h, w) in rng.sample(dims, 30):
    cases.append((rng.choice([1, 2, 3, 5, 8, 16, 31, 64]), h, w, 16, 240000, True))
for (h, w) in [(500, 500), (1, 1), (28, 28)]:
    cases.append((2, h, w, 16, 0, False))    # impossible budget
    cases.append((6, h, w, 16, 2, True))     # needs 6*784 > 2*1568 pixels for one patch

out = []
for (nf, h, w, mn, mx, video) in cases:
    rec = {"num_frames": nf, "height": h, "width": w, "temporal_factor": 2, "factor": 28,
           "min_tokens": mn, "max_tokens": mx, "video": video}
    try:
        a = ipm.smart_resize(nf, h, w, temporal_factor=2, factor=28, min_pixels=mn, max_pixels=mx)
        b = vpm.smart_resize(nf, h, w, temporal_factor=2, factor=28, min_pixels=mn, max_pixels=mx)
        assert a == b
        rec["canvas"] = list(a)
        content, canvas = content_of(nf, h, w, mn, mx, video)
        assert canvas == list(a), (canvas, a)
        rec["content"] = content
    except ValueError as e:
        rec["error"] = str(e)
    out.append(rec)
print(json.dumps({"generator": "gen_smart_resize_cases.py", "transformers": __import__("transformers").__version__,
                  "cases": out}, indent=None, separators=(",", ":")))
