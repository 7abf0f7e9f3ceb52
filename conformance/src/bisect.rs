//! Layer-local vs inherited error: where two backends drift apart, and which stage adds the drift.
//!
//! Backend A is the reference, B the candidate. A runs the tower stage by stage and every stage
//! input and output of A is kept. Then, per stage:
//!
//! - **total**: B's own chained forward against A's output (what a tap diff shows: the error the
//!   stage inherited plus the error it added);
//! - **local**: B's stage run on *A's input* of that stage, against A's output: the error this
//!   stage adds by itself, whatever drift came before it.
//!
//! A kernel that drifts stands out by its local error even when the total error is already large
//! from earlier stages; a stage whose local error is tiny but whose total is large merely inherited.

use crate::metrics::{Stats, compare};
use glm5v_reference::geometry::cu_seqlens;
use glm5v_reference::{Grid, Tower, TowerError};
use ndarray::{Array2, ArrayView2};
use serde::Serialize;

/// One stage's two errors.
#[derive(Debug, Clone, Serialize)]
pub struct StageError {
    /// "patch_embed", "rotary_pos_emb.cos", "rotary_pos_emb.sin", "blocks.{i}", "post_layernorm",
    /// "downsample", "merger".
    pub stage: String,
    /// B's chained forward vs A.
    pub total: Stats,
    /// B's stage on A's input vs A.
    pub local: Stats,
}

/// The bisect of B against A on one batch.
#[derive(Debug, Clone, Serialize)]
pub struct Bisect {
    pub reference: String,
    pub candidate: String,
    pub stages: Vec<StageError>,
}

fn flat(a: &Array2<f32>) -> Vec<f64> {
    a.iter().map(|&x| x as f64).collect()
}

fn stats(b: &Array2<f32>, a: &Array2<f32>) -> Stats {
    // shapes agree: both backends implement the same trait on the same config
    compare(&flat(b), &flat(a), a.ncols())
}

/// Runs the bisect. Both towers must be loaded from the same checkpoint.
pub fn bisect(
    a: &dyn Tower,
    b: &dyn Tower,
    pixel_values: ArrayView2<f32>,
    grids: &[Grid],
) -> Result<Bisect, TowerError> {
    let depth = a.config().depth;
    let cu = cu_seqlens(grids);
    let mut stages = Vec::new();
    let mut push = |stage: String, total: Stats, local: Stats| {
        stages.push(StageError {
            stage,
            total,
            local,
        })
    };

    // patch embedding: the input is the same pixels for both, so local == total
    let xa = a.patch_embed(pixel_values)?;
    let xb = b.patch_embed(pixel_values)?;
    let s = stats(&xb, &xa);
    push("patch_embed".into(), s.clone(), s);
    let (ca, sa) = a.rope(grids)?;
    let (cb, sb) = b.rope(grids)?;
    let s = stats(&cb, &ca);
    push("rotary_pos_emb.cos".into(), s.clone(), s);
    let s = stats(&sb, &sa);
    push("rotary_pos_emb.sin".into(), s.clone(), s);

    let (mut ha, mut hb) = (xa, xb);
    for i in 0..depth {
        let next_a = a.block(i, ha.view(), ca.view(), sa.view(), &cu, None)?;
        // B on A's input, with A's rope tables: only this block's own arithmetic differs
        let local_b = b.block(i, ha.view(), ca.view(), sa.view(), &cu, None)?;
        let next_b = b.block(i, hb.view(), cb.view(), sb.view(), &cu, None)?;
        push(
            format!("blocks.{i}"),
            stats(&next_b, &next_a),
            stats(&local_b, &next_a),
        );
        ha = next_a;
        hb = next_b;
    }
    type Stage<'t> =
        Box<dyn Fn(&dyn Tower, ArrayView2<f32>) -> Result<Array2<f32>, TowerError> + 't>;
    let head: [(&str, Stage); 3] = [
        ("post_layernorm", Box::new(|t, x| t.post_norm(x))),
        ("downsample", Box::new(|t, x| t.downsample(x))),
        ("merger", Box::new(|t, x| t.merger(x, None))),
    ];
    for (name, f) in head {
        let next_a = f(a, ha.view())?;
        let local_b = f(b, ha.view())?;
        let next_b = f(b, hb.view())?;
        push(
            name.into(),
            stats(&next_b, &next_a),
            stats(&local_b, &next_a),
        );
        ha = next_a;
        hb = next_b;
    }
    Ok(Bisect {
        reference: a.describe(),
        candidate: b.describe(),
        stages,
    })
}

impl Bisect {
    /// A table: per stage, the total and the local relative L2, and which dominates.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "A (reference): {}\nB (candidate): {}\n",
            self.reference, self.candidate
        );
        let w = self
            .stages
            .iter()
            .map(|s| s.stage.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(
            o,
            "{:<w$}  {:>12}  {:>12}  {:>9}  {:>10}  note",
            "stage", "total relL2", "local relL2", "local %", "local max"
        );
        let worst_local = self
            .stages
            .iter()
            .map(|s| s.local.rel_l2)
            .fold(0.0f64, f64::max);
        for s in &self.stages {
            let share = if s.total.rel_l2 > 0.0 {
                100.0 * s.local.rel_l2 / s.total.rel_l2
            } else {
                0.0
            };
            let note = if s.local.nonfinite_mismatches > 0 {
                "NaN/Inf differ".to_string()
            } else if worst_local > 0.0 && s.local.rel_l2 == worst_local {
                "<- largest own error".to_string()
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "{:<w$}  {:>12.3e}  {:>12.3e}  {:>8.0}%  {:>10.3e}  {note}",
                s.stage, s.total.rel_l2, s.local.rel_l2, share, s.local.max_abs
            );
        }
        let _ = writeln!(
            o,
            "\ntotal: B's own forward vs A (inherited + added); local: B's stage on A's input vs A (added by the stage \
             alone); local % = local / total"
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glm5v_reference::{CpuTower, TowerWeights};
    use std::path::Path;

    fn tiny() -> TowerWeights<f32> {
        TowerWeights::<f32>::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tower/tiny"),
        )
        .expect("tiny")
    }

    fn batch() -> (Array2<f32>, Vec<Grid>) {
        // two images, 4x4 and 2x6 patches; deterministic pixels
        let grids = vec![[1, 4, 4], [1, 2, 6]];
        let rows = 16 + 12;
        let px = Array2::from_shape_fn((rows, 1176), |(r, c)| {
            (((r * 1176 + c) as f32) * 0.0137).sin()
        });
        (px, grids)
    }

    #[test]
    fn a_tower_against_itself_has_no_error_anywhere() {
        let a = CpuTower::new(tiny());
        let (px, grids) = batch();
        let r = bisect(&a, &a, px.view(), &grids).unwrap();
        // patch_embed, cos, sin, 2 blocks, post_layernorm, downsample, merger
        assert_eq!(r.stages.len(), 3 + 2 + 3);
        assert!(
            r.stages
                .iter()
                .all(|s| s.total.rel_l2 == 0.0 && s.local.rel_l2 == 0.0)
        );
    }

    #[test]
    fn a_drifting_block_stands_out_by_its_local_error_and_later_stages_only_inherit() {
        let a = CpuTower::new(tiny());
        let mut w = tiny();
        // one block's MLP is off by 1%: block 1 adds error, everything after it only inherits
        w.blocks[1].down_w.mapv_inplace(|x| x * 1.01);
        let b = CpuTower::new(w);
        let (px, grids) = batch();
        let r = bisect(&a, &b, px.view(), &grids).unwrap();
        let get = |n: &str| r.stages.iter().find(|s| s.stage == n).unwrap();
        assert_eq!(get("blocks.0").local.rel_l2, 0.0);
        assert_eq!(get("blocks.0").total.rel_l2, 0.0);
        let b1 = get("blocks.1");
        assert!(b1.local.rel_l2 > 1e-4, "{}", b1.local.rel_l2);
        assert_eq!(
            b1.local.rel_l2, b1.total.rel_l2,
            "nothing inherited into block 1"
        );
        for n in ["post_layernorm", "downsample", "merger"] {
            let s = get(n);
            assert_eq!(s.local.rel_l2, 0.0, "{n} adds nothing itself");
            assert!(s.total.rel_l2 > 1e-5, "{n} inherits the drift");
        }
        assert!(r.table().contains("blocks.1") && r.table().contains("<- largest own error"));
    }
}
