"""diff / assert_taps_close / taps.save+load: pass and fail where they should."""

import numpy as np
import pytest

import glm5v
import glm5v.taps
from glm5v.testing import assert_taps_close
from conftest import TOWER, read_safetensors

DUMP = TOWER / "tiny" / "taps.safetensors"


@pytest.fixture(scope="module")
def upstream():
    tensors, meta = read_safetensors(DUMP)
    return {k: np.array(v) for k, v in tensors.items()}


def test_a_dump_against_itself(upstream):
    r = glm5v.diff(DUMP, DUMP)
    assert r.passed and r.first_divergence is None and len(r) == 31  # 30 taps + pixel_values
    assert all(t.rel_l2 == 0.0 and t.max_abs == 0.0 and t.verdict == "pass" for t in r)
    # in memory and on disk give the same numbers
    r2 = glm5v.diff(upstream, DUMP)
    assert [t.rel_l2 for t in r2] == [t.rel_l2 for t in r]
    assert "result: PASS" in str(r)


def test_a_perturbed_tap_is_the_first_divergence(upstream):
    bad = dict(upstream)
    bad["blocks.1.mlp"] = bad["blocks.1.mlp"].copy()
    bad["blocks.1.mlp"][7, 3] += 1.0
    r = glm5v.diff(bad, DUMP)
    assert not r.passed and r.first_divergence == "blocks.1.mlp"
    [f] = r.failures
    assert f.verdict == "fail" and f.worst[:2] == (7, 3) and f.max_abs == pytest.approx(1.0, rel=1e-6)
    assert f.worst_at.startswith("image 0 patch")
    # a looser bound passes it
    assert glm5v.diff(bad, DUMP, tolerance=0.5).passed
    assert not glm5v.diff(bad, DUMP, tolerance="gpu-f32").passed


def test_nan_and_shape_mismatches(upstream):
    bad = dict(upstream)
    bad["patch_embed"] = bad["patch_embed"].copy()
    bad["patch_embed"][0, 0] = np.nan
    bad["merger"] = bad["merger"][:-1]
    bad["extra.tap"] = np.zeros((2, 2), np.float32)
    del bad["downsample"]
    r = glm5v.diff(bad, DUMP)
    assert r["patch_embed"].verdict == "non_finite"
    assert r["merger"].verdict == "shape_mismatch"
    assert r.first_divergence == "patch_embed"
    assert r.only_in_a == ["extra.tap"] and r.only_in_b == ["downsample"]


def test_bad_tolerance_and_files(tmp_path):
    with pytest.raises(glm5v.OptionsError, match="unknown tolerance preset `loose`"):
        glm5v.diff(DUMP, DUMP, tolerance="loose")
    with pytest.raises(glm5v.OptionsError, match="rtol"):
        glm5v.diff(DUMP, DUMP, tolerance=-1.0)
    with pytest.raises(glm5v.ReadError):
        glm5v.diff(tmp_path / "none.safetensors", DUMP)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}")
    with pytest.raises(glm5v.TapsError, match="not a safetensors file"):
        glm5v.diff(junk, DUMP)


def test_assert_taps_close_passes_and_fails(upstream):
    report = assert_taps_close(upstream, DUMP)
    assert report.passed
    bad = dict(upstream)
    bad["blocks.0.attn"] = bad["blocks.0.attn"] * 1.001
    with pytest.raises(AssertionError) as e:
        assert_taps_close(bad, DUMP)
    msg = str(e.value)
    assert "first divergence at `blocks.0.attn`" in msg
    assert "rel L2 1.000e-3 > 1.000e-5" in msg
    assert "worst at image 0 patch" in msg and "result: FAIL" in msg
    # only the taps asked for, and each must be on both sides
    assert_taps_close(bad, DUMP, names=["patch_embed", "merger"])
    with pytest.raises(AssertionError) as e:
        assert_taps_close(bad, DUMP, names=["blocks.0.attn", "merger"])
    assert "only in B" not in str(e.value) and "2 taps compared, 1 failed" in str(e.value)
    assert "self-disagreement 8.057e-7" in str(e.value)  # the reference's metadata still scales the bound
    with pytest.raises(AssertionError, match="missing on one side: blocks.9.mlp"):
        assert_taps_close(upstream, DUMP, names=["merger", "blocks.9.mlp"])
    with pytest.raises(AssertionError, match="no tap is present on both sides"):
        assert_taps_close({"x": np.zeros((2, 2), np.float32)}, DUMP)


def test_save_and_load_round_trip(tmp_path, upstream):
    p = tmp_path / "ours.safetensors"
    glm5v.taps.save(p, upstream, {"producer": "test"})
    tensors, meta = glm5v.taps.load(p)
    assert meta == {"producer": "test"}
    assert set(tensors) == set(upstream)
    for k, v in upstream.items():
        assert tensors[k].tobytes() == np.ascontiguousarray(v).tobytes(), k
    assert glm5v.diff(p, DUMP).passed
    assert not list(tmp_path.glob("*.tmp"))


def test_record_a_torch_module():
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return x + self.proj(self.norm1(x))

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = torch.nn.Linear(12, 8)
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            x = self.patch_embed(x)
            for b in self.blocks:
                x = b(x)
            return x

    torch.manual_seed(0)
    m = Toy()
    x = torch.randn(6, 12)
    with glm5v.taps.record(m) as rec:
        m(x)
    assert set(rec.taps) == {"patch_embed", "blocks.0", "blocks.1", "blocks.0.norm1", "blocks.1.norm1"}
    np.testing.assert_array_equal(rec.taps["patch_embed"], m.patch_embed(x).detach().numpy())
    m(x)  # hooks removed
    assert rec.calls["blocks.0"] == 1
    # a name map for one's own module names; ".input" names take a module's input
    with glm5v.taps.record(m, name_map={"blocks.0.attn.proj.input": "blocks.0.proj", "merger": "blocks.1"}) as r2:
        m(x)
    assert set(r2.taps) == {"blocks.0.attn.proj.input", "merger"}
    assert_taps_close(r2, {"merger": rec.taps["blocks.1"]}, names=["merger"])
    with pytest.raises(KeyError, match="no module 'nope'"):
        glm5v.taps.record(m, name_map={"merger": "nope"})
