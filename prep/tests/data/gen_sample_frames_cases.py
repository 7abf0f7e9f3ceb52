"""Generates sample_frames_cases.json with upstream's `Glm5NextVideoProcessor.sample_frames`.

Pinned: transformers 5.23.0, numpy 2.x, Python 3.11.
Run: python prep/tests/data/gen_sample_frames_cases.py > prep/tests/data/sample_frames_cases.json
"""
import json
import random

from transformers.models.glm5_next.video_processing_glm5_next import Glm5NextVideoProcessor
from transformers.video_utils import VideoMetadata

proc = Glm5NextVideoProcessor()
rng = random.Random(7)
combos = [(1, 30.0, None, 2.0), (2, 30.0, None, 2.0), (13, 4.0, None, 2.0), (100, 25.0, None, 2.0),
          (100, 25.0, 4.2, 2.0), (7, 1.0, None, 2.0), (3000, 29.97, None, 2.0), (5, 0.5, None, 3.0),
          (240, 24.0, None, 1.0), (9, 2.0, 4.0, 2.0), (50000, 30.0, None, 2.0)]
while len(combos) < 100:
    combos.append((rng.randint(1, 600), rng.choice([1.0, 2.0, 12.5, 23.976, 24.0, 25.0, 29.97, 30.0, 60.0]),
                   rng.choice([None, None, round(rng.uniform(0.5, 200.0), 3)]), rng.choice([0.5, 1.0, 2.0, 3.0, 5.0])))
out = []
for total, fps, duration, target in combos:
    md = VideoMetadata(total_num_frames=total, fps=fps, duration=duration)
    rec = {"total_frames": total, "fps": fps, "duration": duration, "target_fps": target}
    try:
        rec["indices"] = [int(i) for i in proc.sample_frames(md, fps=target)]
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {e}"
    out.append(rec)
print(json.dumps({"generator": "gen_sample_frames_cases.py", "max_frames": proc.max_frames, "cases": out},
                 separators=(",", ":")))
