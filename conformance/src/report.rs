//! Comparing two tap dumps: every tap both sides have, in forward order, against one tolerance.

use crate::dump::{Layout, RowLocation, TapDump};
use crate::error::Result;
use crate::metrics::{Stats, compare};
use crate::order::sort_forward;
use crate::tolerance::{Preset, Tolerance};
use serde::Serialize;

/// Which bound to judge by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TolerancePick {
    Preset(Preset),
    /// `--rtol X`: relative L2 only.
    Rtol(f64),
}

impl Default for TolerancePick {
    /// The strictest preset, `f32-vs-upstream`.
    fn default() -> Self {
        TolerancePick::Preset(Preset::F32VsUpstream)
    }
}

/// The verdict on one tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    /// Over tolerance.
    Fail,
    /// NaN/Inf positions differ: numbers were not judged.
    NonFinite,
    ShapeMismatch,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "ok",
            Verdict::Fail => "FAIL",
            Verdict::NonFinite => "NaN/Inf",
            Verdict::ShapeMismatch => "SHAPE",
        }
    }
    pub fn passed(self) -> bool {
        self == Verdict::Pass
    }
}

/// One tap's result.
#[derive(Debug, Clone, Serialize)]
pub struct TapReport {
    pub name: String,
    pub shape_a: Vec<usize>,
    pub shape_b: Vec<usize>,
    pub verdict: Verdict,
    /// Why it failed, in words.
    pub reason: Option<String>,
    pub stats: Option<Stats>,
    /// Which input of the batch the worst element belongs to (when the dump has grids).
    pub worst_at: Option<RowLocation>,
}

impl TapReport {
    /// rel L2 divided by the bound (how close to failing), when numbers were compared.
    pub fn ratio(&self, tol: &Tolerance) -> Option<f64> {
        let s = self.stats.as_ref()?;
        Some(if tol.rel_l2 > 0.0 {
            s.rel_l2 / tol.rel_l2
        } else if s.rel_l2 == 0.0 {
            0.0
        } else {
            f64::INFINITY
        })
    }
}

/// A tensor present on both sides that is not compared, with the reason.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

/// The comparison of dump A (candidate) against dump B (reference).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub a: String,
    pub b: String,
    pub producer_a: Option<String>,
    pub producer_b: Option<String>,
    pub tolerance: Tolerance,
    /// The batch layout (from B, else A).
    pub layout: Option<Layout>,
    /// Set when both dumps carry grids and they differ: the dumps are not of the same input.
    pub layout_mismatch: Option<String>,
    /// In forward order.
    pub taps: Vec<TapReport>,
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    pub skipped: Vec<Skipped>,
    /// The first tap (forward order) that does not pass.
    pub first_divergence: Option<String>,
    pub passed: bool,
}

impl Report {
    /// The tap with the largest rel L2 / bound.
    pub fn worst(&self) -> Option<&TapReport> {
        self.taps
            .iter()
            .filter(|t| t.stats.is_some())
            .max_by(|x, y| {
                x.ratio(&self.tolerance)
                    .unwrap_or(0.0)
                    .total_cmp(&y.ratio(&self.tolerance).unwrap_or(0.0))
            })
    }

    pub fn failures(&self) -> usize {
        self.taps.iter().filter(|t| !t.verdict.passed()).count()
    }
}

/// Resolves the bound for a pair of dumps: `self_disagreement` is read from B (the reference), else A.
pub fn resolve_tolerance(a: &TapDump, b: &TapDump, pick: TolerancePick) -> Result<Tolerance> {
    match pick {
        TolerancePick::Preset(p) => {
            Ok(p.tolerance(b.self_disagreement().or_else(|| a.self_disagreement())))
        }
        TolerancePick::Rtol(x) => Tolerance::rtol(x),
    }
}

/// Compares every tap both dumps have. A is the candidate, B the reference (`||a-b|| / ||b||`).
pub fn compare_dumps(a: &TapDump, b: &TapDump, pick: TolerancePick) -> Result<Report> {
    compare_dumps_with(a, b, resolve_tolerance(a, b, pick)?)
}

/// As [`compare_dumps`], with a bound already resolved.
pub fn compare_dumps_with(a: &TapDump, b: &TapDump, tolerance: Tolerance) -> Result<Report> {
    let (la, lb) = (a.layout()?, b.layout()?);
    let layout_mismatch = match (&la, &lb) {
        (Some(x), Some(y)) if x != y => Some(format!(
            "the dumps are of different batches: A has image grids {:?} video grids {:?}, B has {:?} / {:?}",
            x.images, x.videos, y.images, y.videos
        )),
        _ => None,
    };
    let layout = lb.or(la);

    let mut common = Vec::new();
    let mut skipped = Vec::new();
    for name in a.entries().keys() {
        if !b.contains(name) || crate::dump::GRID_NAMES.contains(&name.as_str()) {
            continue;
        }
        if a.is_tap(name) && b.is_tap(name) {
            common.push(name.clone());
        } else {
            let (da, db) = (a.entries()[name].dtype, b.entries()[name].dtype);
            skipped.push(Skipped {
                name: name.clone(),
                reason: format!("not a float tensor ({da:?} / {db:?})"),
            });
        }
    }
    sort_forward(&mut common);
    let mut only_in_a: Vec<String> = a
        .entries()
        .keys()
        .filter(|n| !b.contains(n) && !is_grid(n))
        .cloned()
        .collect();
    let mut only_in_b: Vec<String> = b
        .entries()
        .keys()
        .filter(|n| !a.contains(n) && !is_grid(n))
        .cloned()
        .collect();
    sort_forward(&mut only_in_a);
    sort_forward(&mut only_in_b);

    let mut taps = Vec::with_capacity(common.len());
    for name in common {
        let (ea, eb) = (&a.entries()[&name], &b.entries()[&name]);
        if ea.shape != eb.shape || ea.shape.len() != 2 {
            let reason = if ea.shape.len() != 2 || eb.shape.len() != 2 {
                format!("not 2-D: A {:?}, B {:?}", ea.shape, eb.shape)
            } else {
                format!("shape A {:?} != B {:?}", ea.shape, eb.shape)
            };
            taps.push(TapReport {
                name,
                shape_a: ea.shape.clone(),
                shape_b: eb.shape.clone(),
                verdict: Verdict::ShapeMismatch,
                reason: Some(reason),
                stats: None,
                worst_at: None,
            });
            continue;
        }
        let (shape, va) = a.tap(&name)?;
        let (_, vb) = b.tap(&name)?;
        let stats = compare(&va, &vb, shape[1]);
        drop((va, vb));
        let reason = tolerance.check(&stats);
        let verdict = match (&reason, stats.nonfinite_mismatches) {
            (None, _) => Verdict::Pass,
            (Some(_), 0) => Verdict::Fail,
            (Some(_), _) => Verdict::NonFinite,
        };
        let worst_at = stats
            .worst
            .and_then(|w| layout.as_ref().and_then(|l| l.locate(w.row, shape[0])));
        taps.push(TapReport {
            name,
            shape_a: shape.clone(),
            shape_b: shape,
            verdict,
            reason,
            stats: Some(stats),
            worst_at,
        });
    }
    let first_divergence = taps
        .iter()
        .find(|t| !t.verdict.passed())
        .map(|t| t.name.clone());
    let passed = layout_mismatch.is_none() && first_divergence.is_none() && !taps.is_empty();
    Ok(Report {
        a: a.path.display().to_string(),
        b: b.path.display().to_string(),
        producer_a: a.metadata.get("producer").cloned(),
        producer_b: b.metadata.get("producer").cloned(),
        tolerance,
        layout,
        layout_mismatch,
        taps,
        only_in_a,
        only_in_b,
        skipped,
        first_divergence,
        passed,
    })
}

fn is_grid(n: &str) -> bool {
    crate::dump::GRID_NAMES.contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;
    use std::collections::HashMap;
    use std::path::Path;

    enum T {
        F32(Vec<usize>, Vec<f32>),
        Bf16(Vec<usize>, Vec<f32>),
        I64(Vec<usize>, Vec<i64>),
    }

    fn dump(name: &str, tensors: Vec<(&str, T)>, meta: &[(&str, &str)]) -> TapDump {
        let bufs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(n, t)| match t {
                T::F32(s, v) => (
                    n.to_string(),
                    Dtype::F32,
                    s,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                T::Bf16(s, v) => (
                    n.to_string(),
                    Dtype::BF16,
                    s,
                    v.iter()
                        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                        .collect(),
                ),
                T::I64(s, v) => (
                    n.to_string(),
                    Dtype::I64,
                    s,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
            })
            .collect();
        let views: Vec<(String, TensorView)> = bufs
            .iter()
            .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        let meta: HashMap<String, String> = meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let bytes = safetensors::serialize(views, Some(meta)).unwrap();
        TapDump::from_bytes(Path::new(name), bytes).unwrap()
    }

    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|i| scale * ((i as f32 * 0.37).sin() + 0.1))
            .collect()
    }

    #[test]
    fn divergence_is_first_failing_tap_in_forward_order() {
        let x = ramp(16 * 4, 1.0);
        let mut bad = x.clone();
        bad[4 * 5 + 2] += 0.5; // row 5, col 2 of blocks.1.mlp
        let mk = |mlp: Vec<f32>, last: Vec<f32>| {
            dump(
                "d",
                vec![
                    ("image_grid_thw", T::I64(vec![1, 3], vec![1, 4, 4])),
                    ("patch_embed", T::F32(vec![16, 4], x.clone())),
                    ("blocks.1.mlp", T::F32(vec![16, 4], mlp)),
                    ("blocks.10", T::F32(vec![16, 4], x.clone())),
                    ("merger", T::F32(vec![4, 4], last)),
                ],
                &[],
            )
        };
        let b = mk(x.clone(), ramp(16, 2.0));
        let mut last = ramp(16, 2.0);
        last[0] = 9.0;
        let a = mk(bad, last);
        let r = compare_dumps(&a, &b, TolerancePick::default()).unwrap();
        let names: Vec<&str> = r.taps.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["patch_embed", "blocks.1.mlp", "blocks.10", "merger"]
        );
        assert_eq!(r.first_divergence.as_deref(), Some("blocks.1.mlp"));
        assert!(!r.passed);
        assert_eq!(r.failures(), 2);
        let t = &r.taps[1];
        let w = t.stats.as_ref().unwrap().worst.unwrap();
        assert_eq!((w.row, w.col), (5, 2));
        // row 5 = merge block 1, inner 1 -> patch (0, 3) of image 0
        let loc = t.worst_at.as_ref().unwrap();
        assert_eq!((loc.kind, loc.index, loc.grid_pos), ("image", 0, [0, 3]));
        assert!(crate::render::table(&r).contains("first divergence: blocks.1.mlp"));
        // the same dump against itself passes with zero error everywhere
        let same = compare_dumps(&b, &b, TolerancePick::default()).unwrap();
        assert!(same.passed);
        assert!(
            same.taps
                .iter()
                .all(|t| t.stats.as_ref().unwrap().rel_l2 == 0.0)
        );
    }

    #[test]
    fn rel_l2_matches_a_known_perturbation() {
        // a = b * (1 + 1e-3) exactly in f64 terms: rel L2 = 1e-3 up to f32 rounding of a
        let b: Vec<f32> = ramp(256, 3.0);
        let a: Vec<f32> = b.iter().map(|v| v * 1.001).collect();
        let da = dump("a", vec![("post_layernorm", T::F32(vec![64, 4], a))], &[]);
        let db = dump("b", vec![("post_layernorm", T::F32(vec![64, 4], b))], &[]);
        let r = compare_dumps(&da, &db, TolerancePick::Rtol(2e-3)).unwrap();
        let s = r.taps[0].stats.as_ref().unwrap();
        assert!((s.rel_l2 - 1e-3).abs() < 1e-6, "{}", s.rel_l2);
        assert!(r.passed);
        let strict = compare_dumps(&da, &db, TolerancePick::default()).unwrap();
        assert!(!strict.passed);
    }

    #[test]
    fn shape_mismatch_and_one_sided_names() {
        let a = dump(
            "a",
            vec![
                ("downsample", T::F32(vec![4, 2], vec![0.0; 8])),
                ("blocks.0.norm1", T::F32(vec![2, 2], vec![1.0; 4])),
            ],
            &[],
        );
        let b = dump(
            "b",
            vec![
                ("downsample", T::F32(vec![2, 4], vec![0.0; 8])),
                ("merger", T::F32(vec![2, 2], vec![1.0; 4])),
            ],
            &[],
        );
        let r = compare_dumps(&a, &b, TolerancePick::default()).unwrap();
        assert_eq!(r.taps.len(), 1);
        assert_eq!(r.taps[0].verdict, Verdict::ShapeMismatch);
        assert_eq!(r.only_in_a, ["blocks.0.norm1"]);
        assert_eq!(r.only_in_b, ["merger"]);
        assert!(!r.passed);
    }

    #[test]
    fn nan_positions_must_match_before_numbers_count() {
        let b = vec![1.0, f32::NAN, 2.0, 3.0];
        let a = vec![1.0, 5.0, 2.0, f32::NAN];
        let da = dump("a", vec![("patch_embed", T::F32(vec![2, 2], a))], &[]);
        let db = dump(
            "b",
            vec![("patch_embed", T::F32(vec![2, 2], b.clone()))],
            &[],
        );
        let r = compare_dumps(&da, &db, TolerancePick::Rtol(10.0)).unwrap();
        assert_eq!(r.taps[0].verdict, Verdict::NonFinite);
        assert!(!r.passed);
        // identical NaNs pass
        let dc = dump("c", vec![("patch_embed", T::F32(vec![2, 2], b))], &[]);
        assert!(
            compare_dumps(&dc, &db, TolerancePick::default())
                .unwrap()
                .passed
        );
    }

    #[test]
    fn nothing_in_common_is_not_a_pass() {
        let a = dump("a", vec![("x", T::F32(vec![1, 1], vec![0.0]))], &[]);
        let b = dump("b", vec![("y", T::F32(vec![1, 1], vec![0.0]))], &[]);
        assert!(
            !compare_dumps(&a, &b, TolerancePick::default())
                .unwrap()
                .passed
        );
    }

    #[test]
    fn bf16_is_converted_and_self_disagreement_scales_the_bound() {
        let v = ramp(8, 1.0);
        let a = dump("a", vec![("merger", T::Bf16(vec![2, 4], v.clone()))], &[]);
        let b = dump(
            "b",
            vec![("merger", T::F32(vec![2, 4], v))],
            &[("self_disagreement", "1e-3")],
        );
        let r = compare_dumps(&a, &b, TolerancePick::default()).unwrap();
        assert!((r.tolerance.rel_l2 - 3e-3).abs() < 1e-15);
        let s = r.taps[0].stats.as_ref().unwrap();
        // bf16 rounding: relative error per value at most 2^-9
        assert!(s.rel_l2 > 0.0 && s.rel_l2 < 2f64.powi(-9), "{}", s.rel_l2);
        assert!(r.passed);
    }

    #[test]
    fn different_batches_are_reported() {
        let a = dump(
            "a",
            vec![
                ("image_grid_thw", T::I64(vec![1, 3], vec![1, 2, 2])),
                ("merger", T::F32(vec![1, 1], vec![1.0])),
            ],
            &[],
        );
        let b = dump(
            "b",
            vec![
                ("image_grid_thw", T::I64(vec![1, 3], vec![1, 2, 4])),
                ("merger", T::F32(vec![1, 1], vec![1.0])),
            ],
            &[],
        );
        let r = compare_dumps(&a, &b, TolerancePick::default()).unwrap();
        assert!(r.layout_mismatch.is_some());
        assert!(!r.passed);
    }

    #[test]
    fn svg_has_one_line_per_block_kind() {
        let x = ramp(8, 1.0);
        let mut tensors = vec![("patch_embed", T::F32(vec![2, 4], x.clone()))];
        let names = ["blocks.0.norm1", "blocks.0", "blocks.1.norm1", "blocks.1"];
        for n in names {
            tensors.push((n, T::F32(vec![2, 4], x.clone())));
        }
        tensors.push(("merger", T::F32(vec![2, 4], x.clone())));
        let b = dump("b", tensors, &[]);
        let r = compare_dumps(&b, &b, TolerancePick::default()).unwrap();
        let svg = crate::render::svg(&r);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">norm1<") && svg.contains(">block<"));
        let json: serde_json::Value = serde_json::from_str(&crate::render::json(&r)).unwrap();
        assert_eq!(json["taps"].as_array().unwrap().len(), 6);
    }
}
