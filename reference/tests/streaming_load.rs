//! `CpuTower::load` (each `Linear` weight packed as it is read, the checkpoint's pages given
//! back) builds the same tower as `CpuTower::new` over `TowerWeights::load`: the same
//! embeddings bit for bit, in both modes, on the tiny checkpoint and on a synthetic one whose
//! weights are bf16 (so the bf16 kernels of this CPU run).

use glm5v_reference::synth::{Preset, SynthSpec, write_checkpoint};
use glm5v_reference::{CpuTower, Tower, TowerWeights};
use ndarray::Array2;
use std::path::Path;

fn same_both_ways(dir: &Path) {
    let grids = [[1, 4, 6]];
    let px = Array2::from_shape_fn((24, 1176), |(r, c)| {
        ((r * 1176 + c) % 17) as f32 / 8.0 - 1.0
    });
    for bf16 in [false, true] {
        let w = TowerWeights::<f32>::load(dir).unwrap();
        let a = if bf16 {
            CpuTower::new_bf16(w)
        } else {
            CpuTower::new(w)
        };
        let b = CpuTower::<f32>::load(dir, bf16).unwrap();
        let (ya, yb) = (
            a.forward(px.view(), &grids, None).unwrap(),
            b.forward(px.view(), &grids, None).unwrap(),
        );
        assert_eq!(ya.dim(), yb.dim());
        assert!(
            ya.iter()
                .zip(yb.iter())
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{} bf16={bf16}: the streamed load differs",
            dir.display()
        );
        assert_eq!(a.describe(), b.describe());
    }
}

#[test]
fn streamed_load_builds_the_same_tower() {
    same_both_ways(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny"
    )));
    let dir = tempfile::tempdir().unwrap();
    let synth = dir.path().join("tiny-bf16");
    write_checkpoint(&synth, &SynthSpec::new(Preset::Tiny, 3)).unwrap();
    same_both_ways(&synth);
}
