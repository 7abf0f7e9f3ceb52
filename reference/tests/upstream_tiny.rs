//! End-to-end against upstream: the tiny fixture of `tests/data/gen_tiny_upstream.py`
//! (transformers 5.23.0, torch 2.15.0, f32 eager) — a BF16 checkpoint, a packed batch of two
//! images and one two-frame-pair video, and every TAPS.md tap of upstream's forward.
//! Every tap must agree to a relative L2 error of 1e-5, in f32 and in f64.

use glm5v_reference::{
    CpuTower, EmbedOptions, Embedder, Grid, Precision, TapFilter, TapMap, Threads, Tower,
    TowerWeights, tap_names_for,
};
use ndarray::Array2;
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};

const TOLERANCE: f64 = 1e-5;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny")
}

struct Upstream {
    bytes: Vec<u8>,
}

impl Upstream {
    fn load() -> Self {
        Self {
            bytes: std::fs::read(fixture().join("taps.safetensors")).expect("fixture taps"),
        }
    }
    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("valid dump")
    }
    fn f32(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let st = self.st();
        let t = st
            .tensor(name)
            .unwrap_or_else(|_| panic!("upstream tap {name}"));
        (t.shape().to_vec(), bytemuck::pod_collect_to_vec(t.data()))
    }
    fn inputs(&self) -> (Array2<f32>, Vec<Grid>) {
        let (shape, px) = self.f32("pixel_values");
        let st = self.st();
        let g = st.tensor("image_grid_thw").unwrap();
        let g: Vec<i64> = bytemuck::pod_collect_to_vec(g.data());
        let grids = g
            .chunks(3)
            .map(|c| [c[0] as usize, c[1] as usize, c[2] as usize])
            .collect();
        (
            Array2::from_shape_vec((shape[0], shape[1]), px).unwrap(),
            grids,
        )
    }
    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.st().names().into_iter().map(String::from).collect();
        n.retain(|n| n != "pixel_values" && n != "image_grid_thw");
        n.sort();
        n
    }
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den.max(1e-300)).sqrt()
}

/// Runs `tower` on the fixture batch and compares every tap; returns (worst error, its tap).
fn compare(tower: &dyn Tower, up: &Upstream) -> (f64, String) {
    let (px, grids) = up.inputs();
    let mut taps = TapMap::new(TapFilter::all());
    let out = tower
        .forward(px.view(), &grids, Some(&mut taps))
        .expect("forward");
    let ours: Vec<String> = taps.taps.keys().cloned().collect();
    assert_eq!(ours, up.names(), "the same tap names on both sides");
    let mut worst = (0.0, String::new());
    let mut lines = Vec::new();
    for name in up.names() {
        let (shape, want) = up.f32(&name);
        let got = taps.get(&name).unwrap();
        assert_eq!(vec![got.rows, got.cols], shape, "shape of {name}");
        let e = rel_l2(&got.data, &want);
        assert!(
            got.data.iter().all(|v| v.is_finite()),
            "{name} has non-finite values"
        );
        lines.push(format!("  {name:32} {e:.3e}"));
        if e > worst.0 {
            worst = (e, name.clone());
        }
    }
    let (_, merger) = up.f32("merger");
    assert_eq!(
        out.as_slice().unwrap(),
        taps.get("merger").unwrap().data.as_slice(),
        "output = merger tap"
    );
    println!(
        "{} vs upstream f32 (rel L2 per tap):\n{}",
        tower.describe(),
        lines.join("\n")
    );
    println!(
        "{}: worst {:.3e} at {}; final output {:.3e}",
        tower.describe(),
        worst.0,
        worst.1,
        rel_l2(out.as_slice().unwrap(), &merger)
    );
    worst
}

#[test]
fn every_tap_matches_upstream_in_f32_and_f64() {
    let up = Upstream::load();
    let f32_tower = CpuTower::new(TowerWeights::<f32>::load(&fixture()).unwrap());
    assert!(f32_tower.warnings().is_empty());
    let (worst32, at32) = compare(&f32_tower, &up);
    assert!(
        worst32 <= TOLERANCE,
        "f32: worst tap {at32} at {worst32:.3e}"
    );
    let f64_tower = CpuTower::new(TowerWeights::<f64>::load(&fixture()).unwrap());
    let (worst64, at64) = compare(&f64_tower, &up);
    assert!(
        worst64 <= TOLERANCE,
        "f64: worst tap {at64} at {worst64:.3e}"
    );
}

#[test]
fn stage_by_stage_equals_the_fused_forward() {
    // The trait's default `forward` (composing the stages through f32 host arrays) must give
    // the f32 tower's own forward bit for bit, and each stage must accept upstream's inputs.
    struct Staged<'a>(&'a dyn Tower);
    impl Tower for Staged<'_> {
        fn config(&self) -> &glm5v_reference::VisionConfig {
            self.0.config()
        }
        fn describe(&self) -> String {
            "staged".into()
        }
        fn patch_embed(
            &self,
            p: ndarray::ArrayView2<f32>,
        ) -> Result<Array2<f32>, glm5v_reference::TowerError> {
            self.0.patch_embed(p)
        }
        fn rope(
            &self,
            g: &[Grid],
        ) -> Result<(Array2<f32>, Array2<f32>), glm5v_reference::TowerError> {
            self.0.rope(g)
        }
        fn block(
            &self,
            i: usize,
            h: ndarray::ArrayView2<f32>,
            c: ndarray::ArrayView2<f32>,
            s: ndarray::ArrayView2<f32>,
            cu: &[usize],
            t: Option<&mut dyn glm5v_reference::TapSink>,
        ) -> Result<Array2<f32>, glm5v_reference::TowerError> {
            self.0.block(i, h, c, s, cu, t)
        }
        fn post_norm(
            &self,
            h: ndarray::ArrayView2<f32>,
        ) -> Result<Array2<f32>, glm5v_reference::TowerError> {
            self.0.post_norm(h)
        }
        fn downsample(
            &self,
            h: ndarray::ArrayView2<f32>,
        ) -> Result<Array2<f32>, glm5v_reference::TowerError> {
            self.0.downsample(h)
        }
        fn merger(
            &self,
            x: ndarray::ArrayView2<f32>,
            t: Option<&mut dyn glm5v_reference::TapSink>,
        ) -> Result<Array2<f32>, glm5v_reference::TowerError> {
            self.0.merger(x, t)
        }
    }
    let up = Upstream::load();
    let tower = CpuTower::new(TowerWeights::<f32>::load(&fixture()).unwrap());
    let (px, grids) = up.inputs();
    let fused = tower.forward(px.view(), &grids, None).unwrap();
    let mut taps = TapMap::new(TapFilter::all());
    let staged = Staged(&tower)
        .forward(px.view(), &grids, Some(&mut taps))
        .unwrap();
    assert_eq!(fused, staged);
    assert_eq!(taps.taps.len(), tap_names_for(tower.config()).len());

    // Feed upstream's own block-1 input into our block 1: the output must match upstream's.
    let (s0, b0) = up.f32("blocks.0");
    let (_, cos) = up.f32("rotary_pos_emb.cos");
    let (_, sin) = up.f32("rotary_pos_emb.sin");
    let hd = tower.config().head_dim();
    let h = Array2::from_shape_vec((s0[0], s0[1]), b0).unwrap();
    let c = Array2::from_shape_vec((s0[0], hd), cos).unwrap();
    let s = Array2::from_shape_vec((s0[0], hd), sin).unwrap();
    let cu = glm5v_reference::geometry::cu_seqlens(&grids);
    let b1 = tower
        .block(1, h.view(), c.view(), s.view(), &cu, None)
        .unwrap();
    let (_, want) = up.f32("blocks.1");
    let e = rel_l2(b1.as_slice().unwrap(), &want);
    assert!(e <= TOLERANCE, "block 1 on upstream's input: {e:.3e}");
}

#[test]
fn embedder_runs_the_fixture_with_progress_in_its_own_pool() {
    let up = Upstream::load();
    let (px, grids) = up.inputs();
    let emb = Embedder::load(
        &fixture(),
        EmbedOptions {
            precision: Precision::F32,
            threads: Threads::Count(2),
        },
    )
    .unwrap();
    let mut steps = Vec::new();
    let mut on_progress = |done: usize, total: usize| steps.push((done, total));
    let out = emb
        .embed_pixels_with(px.view(), &grids, None, Some(&mut on_progress))
        .unwrap();
    let depth = emb.config().depth;
    assert_eq!(
        steps,
        (1..=depth + 2).map(|d| (d, depth + 2)).collect::<Vec<_>>()
    );
    let (_, merger) = up.f32("merger");
    assert!(rel_l2(out.embeddings.as_slice().unwrap(), &merger) <= TOLERANCE);
    let counts: Vec<(usize, usize)> = out
        .items
        .iter()
        .map(|s| (s.token_offset, s.token_count))
        .collect();
    assert_eq!(counts, vec![(0, 6), (6, 6), (12, 8)]);
    assert_eq!(out.embeddings.nrows(), 20);
    // bad input is a typed error, not a panic
    let bad = emb.embed_pixels(px.view(), &[[1, 4, 6]]).unwrap_err();
    assert!(bad.to_string().contains("rows"), "{bad}");
}

/// 32000 patches in one attention segment (memory stays linear in the segment length).
/// Slow in debug builds: `cargo test --release -p glm5v-reference -- --ignored`.
#[test]
#[ignore]
fn one_segment_of_32000_patches_runs() {
    let tower = CpuTower::new(TowerWeights::<f32>::load(&fixture()).unwrap());
    let grids = [[1, 160, 200]];
    let n = 160 * 200;
    let px = Array2::from_shape_fn((n, 1176), |(r, c)| {
        ((r * 31 + c * 7) % 101) as f32 / 50.0 - 1.0
    });
    let t = std::time::Instant::now();
    let out = tower.forward(px.view(), &grids, None).unwrap();
    println!("32000-patch segment: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(out.dim(), (n / 4, 96));
    assert!(out.iter().all(|v| v.is_finite()));
}
