"""The Parquet dataset of `glm5v embed --out NAME.parquet`, read back as its readers do.

    python cli/tests/python/read_dataset.py target/release/glm5v

Runs glm5v embed over fixture images (one of them empty) into a temporary dataset, then reads it
with pyarrow.dataset, pandas and (when installed) Hugging Face datasets: the columns and their
types exactly, a row per input in input order, the error row, the embeddings' bytes against the
same run's safetensors output. Exits non-zero on any difference. CI runs it with the Python
package's venv (.ci/run), which has pyarrow and pandas.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
IMAGES = [
    "fixtures/tower/inputs/scene_112x140.png",
    "fixtures/prep/images/jpeg_exif_6.jpg",
    "fixtures/prep/images/webp_lossy.webp",
]


def main(glm5v):
    with tempfile.TemporaryDirectory() as d:
        empty = os.path.join(d, "empty.png")
        open(empty, "wb").close()
        inputs = IMAGES[:2] + [empty] + IMAGES[2:]
        out = os.path.join(d, "x.parquet")
        r = subprocess.run([glm5v, "embed", "--model", "fixtures/tower/tiny", *inputs, "--out", out,
                            "--shard-rows", "2"], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 3, (r.returncode, r.stderr)
        st = os.path.join(d, "x.safetensors")
        r = subprocess.run([glm5v, "embed", "--model", "fixtures/tower/tiny", *IMAGES, "--out", st],
                           cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

        ds = pds.dataset(out, format="parquet")
        schema = ds.schema
        want = pa.schema([
            pa.field("input", pa.string(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            pa.field("error", pa.string()),
            pa.field("grid_thw", pa.list_(pa.int32())),
            pa.field("tokens", pa.int32()),
            pa.field("shape", pa.list_(pa.int32())),
            pa.field("embedding", pa.binary()),
        ])
        assert schema.remove_metadata().equals(want), f"{schema}\n!=\n{want}"
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        assert meta["glm5v.model"] == "fixtures/tower/tiny", meta
        assert meta["glm5v.dtype"] == "f32" and meta["glm5v.precision"] == "f32", meta
        assert sorted(os.listdir(out)) == ["part-00000.parquet", "part-00001.parquet"], os.listdir(out)

        table = ds.to_table()
        df = table.to_pandas()
        assert list(df["input"]) == inputs, list(df["input"])
        assert list(df["status"]) == ["ok", "ok", "error", "ok"]
        assert "empty" in df["error"][2] and df["embedding"][2] is None

        # the safetensors file of the same images: embeddings concatenated in order
        with open(st, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            data = f.read()
        e = header["embeddings"]
        lo, hi = e["data_offsets"]
        ref = np.frombuffer(data[lo:hi], dtype="<f4").reshape(e["shape"])
        rows, off = [], 0
        for i in (0, 1, 3):
            tokens, hidden = df["shape"][i]
            assert tokens == df["tokens"][i] and hidden == 96
            emb = np.frombuffer(df["embedding"][i], dtype="<f4").reshape(tokens, hidden)
            assert np.array_equal(emb.view(np.uint32), ref[off:off + tokens].view(np.uint32)), i
            assert int(np.prod(df["grid_thw"][i])) == tokens * 4
            off += tokens
        assert off == ref.shape[0]
        try:
            import datasets  # noqa: F401
        except ImportError:
            print("read_dataset: Hugging Face datasets not installed: skipped its check")
        else:
            hf = datasets.load_dataset("parquet", data_files=os.path.join(out, "part-*.parquet"),
                                       split="train")
            assert hf["input"] == inputs
    print(f"read_dataset: ok ({len(inputs)} rows, pyarrow {pa.__version__})")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "target/release/glm5v")
