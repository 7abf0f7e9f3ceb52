"""glm5v.ray.EmbedBatch: called directly on batches in Ray Data's formats, and in a real Ray
Data pipeline on a local Ray instance (skipped where ray is not installed; python/ci.sh
installs it). Rows are held to ``Embedder.embed`` of each input alone, bit for bit."""

import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import glm5v
from conftest import PREP, TOWER

TINY = TOWER / "tiny"
HERE = Path(__file__).resolve().parent
COLUMNS = ["input", "status", "error", "grid_thw", "tokens", "shape", "embedding"]


def image_paths():
    names = ["bmp_rgb.bmp", "jpeg_exif_6.jpg", "png_palette_alpha.png", "webp_lossy.webp", "tiff_rgb.tiff"]
    return sorted(str(p) for p in (TOWER / "inputs").glob("*.png")) + [str(PREP / "images" / n) for n in names]


@pytest.fixture(scope="module")
def direct():
    e = glm5v.Embedder(TINY)
    out = {}
    for p in image_paths():
        r = e.embed(p)
        out[p] = (list(r.spans[0].grid_thw), r.embeddings)
    return out


def test_import_glm5v_does_not_import_ray():
    code = "import sys, glm5v; assert 'ray' not in sys.modules and 'glm5v.ray' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_bf16_bytes_round_to_nearest_even():
    from glm5v.ray import bf16_bytes, decode_embedding

    # 1.0, -2.5, ties to even (down, up), above a tie, the largest finite (rounds to inf), inf,
    # two NaNs (kept NaN, quiet), the smallest subnormal (rounds to 0)
    bits = np.array(
        [0x3F800000, 0xC0200000, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0xFFC12345, 1],
        dtype="<u4",
    )
    got = np.frombuffer(bf16_bytes(bits.view("<f4")), dtype="<u2").tolist()
    want = [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7F80, 0x7FC0, 0xFFC1, 0x0000]
    assert [hex(v) for v in got] == [hex(v) for v in want]
    row = {"shape": [1, 2], "embedding": bf16_bytes(np.array([[1.0, -2.5]], np.float32))}
    np.testing.assert_array_equal(decode_embedding(row, "bf16"), [[1.0, -2.5]])


def check_rows(cols, paths, direct, dtype="f32"):
    import pyarrow as pa
    from glm5v.ray import bf16_bytes

    assert list(cols) == COLUMNS
    types = {k: v.type for k, v in cols.items()}
    i32s = pa.list_(pa.int32())
    assert types == {
        "input": pa.string(),
        "status": pa.string(),
        "error": pa.string(),
        "grid_thw": i32s,
        "tokens": pa.int32(),
        "shape": i32s,
        "embedding": pa.binary(),
    }
    rows = pa.table(cols).to_pylist()
    assert [r["input"] for r in rows] == paths
    for r in rows:
        grid, emb = direct[r["input"]]
        assert (r["status"], r["error"]) == ("ok", None)
        assert r["grid_thw"] == grid and r["tokens"] == emb.shape[0] and r["shape"] == [emb.shape[0], 96]
        want = emb.astype("<f4").tobytes() if dtype == "f32" else bf16_bytes(emb)
        assert r["embedding"] == want
    return rows


def test_embed_batch_on_a_numpy_batch(direct):
    pytest.importorskip("pyarrow")
    from glm5v.ray import EmbedBatch, decode_embedding

    paths = image_paths()
    batch = {
        "bytes": np.array([Path(p).read_bytes() for p in paths], dtype=object),
        "path": np.array(paths),
    }
    fn = EmbedBatch(str(TINY), batch_tokens=100)
    rows = check_rows(fn(batch), paths, direct)
    np.testing.assert_array_equal(decode_embedding(rows[0]), direct[paths[0]][1])
    # bf16 bytes of the same rows; lists instead of arrays
    fn16 = EmbedBatch(str(TINY), out_dtype="bf16")
    rows16 = check_rows(fn16({"bytes": [Path(p).read_bytes() for p in paths], "path": paths}), paths, direct, "bf16")
    assert len(rows16[0]["embedding"]) * 2 == len(rows[0]["embedding"])
    # picklable (Ray pickles the instance's class and arguments; the instance too, here)
    fn2 = pickle.loads(pickle.dumps(fn))
    assert fn2(batch)["embedding"].to_pylist() == [r["embedding"] for r in rows]


def test_embed_batch_on_pandas_and_arrow_batches(direct):
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    from glm5v.ray import EmbedBatch

    paths = image_paths()[:4]
    data = [Path(p).read_bytes() for p in paths]
    fn = EmbedBatch(str(TINY))
    check_rows(fn(pd.DataFrame({"bytes": data, "path": paths})), paths, direct)
    check_rows(fn(pa.table({"bytes": data, "path": paths})), paths, direct)


def test_embed_batch_bad_inputs_are_error_rows(direct, tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    from glm5v.ray import EmbedBatch

    good = image_paths()[0]
    png = Path(good).read_bytes()
    batch = {
        "bytes": np.array([png, b"", b"GIF89a-garbage", png[:40], None, png], dtype=object),
        "path": np.array(["/d/a.png", "/d/empty.png", "/d/bad.gif", "/d/cut.png", "/d/none.png", "/d/b.png"]),
    }
    cols = EmbedBatch(str(TINY))(batch)
    rows = pa.table(cols).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "error", "error", "error", "error", "ok"]
    assert [r["input"] for r in rows] == list(batch["path"])
    grid, emb = direct[good]
    for r in (rows[0], rows[-1]):
        assert r["error"] is None and r["grid_thw"] == grid and r["embedding"] == emb.tobytes()
    for r in rows[1:-1]:
        assert r["input"] in r["error"], r  # messages name the path
        assert r["grid_thw"] is None and r["tokens"] is None and r["shape"] is None and r["embedding"] is None
    assert "no file bytes" in rows[4]["error"]
    with pytest.raises(ValueError, match="bytes"):
        EmbedBatch(str(TINY))({"image": np.zeros((1, 4, 4, 3), np.uint8)})
    with pytest.raises(glm5v.OptionsError, match="out_dtype"):
        EmbedBatch(str(TINY), out_dtype="f16")


# ---- a real Ray Data pipeline ---------------------------------------------------------------

PIPELINE = r'''
import json, os, sys, time
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray
from glm5v.ray import EmbedBatch

model, paths, out_dir = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
t0 = time.time()
ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
         log_to_driver=False, configure_logging=False)
t1 = time.time()
ds = ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=3)
ds = ds.map_batches(EmbedBatch, fn_constructor_args=(model,),
                    fn_constructor_kwargs={"batch_tokens": 100, "threads": 1},
                    concurrency=1, batch_size=4)
rows = ds.take_all()
ds.write_parquet(out_dir)
t2 = time.time()
ray.shutdown()
print(json.dumps({"rows": [{k: (v.hex() if isinstance(v, bytes) else v) for k, v in r.items()} for r in rows],
                  "init_s": t1 - t0, "pipeline_s": t2 - t1}))
'''


def loopback_only(cmd):
    """``cmd`` in a network namespace of its own with only the loopback interface up (Ray's
    servers bind every interface; there, every interface is 127.0.0.1)."""
    if shutil.which("unshare") and shutil.which("ip"):
        for flags in (["-n"], ["-rn"]):
            probe = subprocess.run(["unshare", *flags, "ip", "link", "set", "lo", "up"], capture_output=True)
            if probe.returncode == 0:
                script = "ip link set lo up && exec \"$@\""
                return ["unshare", *flags, "sh", "-c", script, "sh", *cmd]
    if os.environ.get("GLM5V_RAY_ANY_INTERFACE") == "1":
        return cmd
    pytest.skip("cannot start Ray on loopback only (no `unshare -n`); GLM5V_RAY_ANY_INTERFACE=1 runs it anyway")


def test_ray_data_pipeline(direct, tmp_path):
    pytest.importorskip("ray")
    pq = pytest.importorskip("pyarrow.parquet")
    import json

    paths = image_paths()
    bad = tmp_path / "empty.png"
    bad.write_bytes(b"")
    inputs = paths + [str(bad)]
    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    cmd = loopback_only([sys.executable, str(script), str(TINY), json.dumps(inputs), str(tmp_path / "out.parquet")])
    t = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=420)
    wall = time.time() - t
    assert out.returncode == 0, out.stderr[-4000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nray pipeline: {wall:.1f} s in all (ray.init {res['init_s']:.1f} s, pipeline {res['pipeline_s']:.1f} s)")
    rows = sorted(res["rows"], key=lambda r: r["input"])  # Ray keeps no order across blocks
    assert sorted(r["input"] for r in rows) == sorted(inputs)
    by_input = {r["input"]: r for r in rows}
    for p in paths:
        r = by_input[p]
        grid, emb = direct[p]
        assert (r["status"], r["error"], r["grid_thw"], r["tokens"]) == ("ok", None, grid, emb.shape[0])
        assert r["shape"] == [emb.shape[0], 96]
        assert bytes.fromhex(r["embedding"]) == emb.tobytes()
    r = by_input[str(bad)]
    assert r["status"] == "error" and str(bad) in r["error"] and r["embedding"] is None
    # what write_parquet wrote: the CLI's column names and types
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == COLUMNS
    assert str(table.schema.field("grid_thw").type) == "list<element: int32>" or str(
        table.schema.field("grid_thw").type
    ) == "list<item: int32>"
    assert str(table.schema.field("embedding").type) == "binary"
    assert table.num_rows == len(inputs)
