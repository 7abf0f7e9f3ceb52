//! Every tolerance of the project, in one place.
//!
//! A tap passes when its relative L2 error `||a - b|| / ||b||` (f64) is within `rel_l2`, its
//! cosine similarity is at least `min_cosine` (when the preset sets one), and its NaN/Inf
//! positions match (always required, whatever the preset). Relative L2 is the one metric because
//! it is scale-free (taps range from unit-RMS norms to merger outputs in the hundreds) and because
//! upstream's own disagreement with itself is measured in it.

use crate::error::{ConformanceError, Result};
use crate::metrics::Stats;
use serde::Serialize;

/// The named presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Preset {
    /// Our f32 CPU oracle against upstream's f32 PyTorch forward.
    ///
    /// `rel_l2 <= max(1e-5, 3 x self_disagreement)`. Two correct f32 implementations that sum in
    /// different orders disagree by a few ulps per op, compounding with depth; upstream disagrees
    /// with *itself* (eager vs SDPA attention) by ~2e-6 on small sharp-weighted configs and ~8.5e-6
    /// at full depth. The fixture records that figure as `self_disagreement`; we ask to be within
    /// three times it, and never tighter than 1e-5 (the floor where f32 reduction order alone
    /// decides). Absent metadata means 1e-5. The default: the strictest preset.
    F32VsUpstream,
    /// A GPU f32 backend against the CPU oracle: `rel_l2 <= 1e-4`.
    ///
    /// GPU kernels reduce in other orders and may use fused multiply-add and fast exp/erf, so a
    /// correct f32 GPU forward is not held to the oracle's 1e-5 floor; a real bug (wrong eps, rope,
    /// clamp, segment leak) costs 1e-3 or more, so 1e-4 still catches every structural error.
    /// Measured on an H200 (2026-11-29, `glm5v conformance --backend gpu`): 1.5e-6..5.8e-6 against
    /// upstream, 4.0e-6 against the CPU oracle at full depth (0.06 x this bound).
    GpuF32,
    /// A GPU bf16 backend against the f32 oracle: `rel_l2 <= 2e-2` and `cosine >= 0.999`.
    ///
    /// bf16 keeps 8 significant bits (relative rounding 2^-9 ~ 2e-3 per value), and the error
    /// compounds through the blocks. Measured on an H200 (2026-11-29): 9.3e-3..1.2e-2 on the
    /// two-block fixtures and 2.0e-2 at full depth (24 blocks), i.e. this bound has **no margin**
    /// at full depth: a bf16 kernel change that adds any drift will fail it, which is what it is
    /// for, but a real 4096-wide checkpoint may need the bound revisited with data. The cosine
    /// floor catches a direction error that a norm-preserving bug (e.g. a permutation of heads)
    /// could hide inside a loose L2 bound.
    GpuBf16,
    /// The CPU's bf16 mode against upstream's f32 forward: `rel_l2 <= 1.6e-2`, `cosine >=
    /// 0.999`. The mode keeps bf16 weights and f32 accumulation, and feeds its products bf16
    /// inputs except in the first four blocks, whose inputs keep an IEEE half's 11 significant
    /// bits (the GPU runs its block products in half; an early rounding error is carried and
    /// grown by every block after it). Measured 2026-12-06 on a 2-core Xeon (AVX-512, its
    /// AVX512-BF16 kernel and its f32 panels): 1.25e-2..1.26e-2 at full depth (24 blocks; bf16
    /// inputs everywhere gave 1.90e-2, the GPU's bf16 1.06e-2), 5.2e-3..9.8e-3 on the one- and
    /// two-block fixtures: 0.79x this bound at worst, which is the target that change was made
    /// for (issue 38: CPU bf16 within 1.2x of the GPU's error, at most 1.6e-2).
    CpuBf16,
}

impl Preset {
    pub const ALL: [Preset; 4] = [
        Preset::F32VsUpstream,
        Preset::GpuF32,
        Preset::GpuBf16,
        Preset::CpuBf16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::F32VsUpstream => "f32-vs-upstream",
            Preset::GpuF32 => "gpu-f32",
            Preset::GpuBf16 => "gpu-bf16",
            Preset::CpuBf16 => "cpu-bf16",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| ConformanceError::UnknownPreset(s.into()))
    }

    /// The bounds of the preset for a reference whose upstream self-disagreement is `self_disagreement`
    /// (only `f32-vs-upstream` uses it).
    pub fn tolerance(self, self_disagreement: Option<f64>) -> Tolerance {
        match self {
            Preset::F32VsUpstream => {
                let sd = self_disagreement.unwrap_or(0.0);
                Tolerance {
                    name: self.name().into(),
                    rel_l2: F32_FLOOR.max(3.0 * sd),
                    min_cosine: None,
                    self_disagreement,
                }
            }
            Preset::GpuF32 => Tolerance {
                name: self.name().into(),
                rel_l2: 1e-4,
                min_cosine: None,
                self_disagreement: None,
            },
            Preset::GpuBf16 => Tolerance {
                name: self.name().into(),
                rel_l2: 2e-2,
                min_cosine: Some(0.999),
                self_disagreement: None,
            },
            Preset::CpuBf16 => Tolerance {
                name: self.name().into(),
                rel_l2: 1.6e-2,
                min_cosine: Some(0.999),
                self_disagreement: None,
            },
        }
    }
}

/// The floor of `f32-vs-upstream`.
pub const F32_FLOOR: f64 = 1e-5;

/// A resolved bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tolerance {
    /// The preset name, or "rtol" for a bound given by hand.
    pub name: String,
    pub rel_l2: f64,
    pub min_cosine: Option<f64>,
    /// The self-disagreement the bound was scaled by, when it was.
    pub self_disagreement: Option<f64>,
}

impl Tolerance {
    /// A bound given by hand (`--rtol X`): relative L2 only.
    pub fn rtol(x: f64) -> Result<Self> {
        if !(x.is_finite() && x >= 0.0) {
            return Err(ConformanceError::InvalidTolerance(format!(
                "--rtol must be a finite number >= 0, got {x}"
            )));
        }
        Ok(Tolerance {
            name: "rtol".into(),
            rel_l2: x,
            min_cosine: None,
            self_disagreement: None,
        })
    }

    /// `None` when the tap passes, else the reason it fails.
    pub fn check(&self, s: &Stats) -> Option<String> {
        if s.nonfinite_mismatches > 0 {
            let [r, c] = s.first_nonfinite_mismatch.unwrap_or([0, 0]);
            return Some(format!(
                "NaN/Inf at {} positions differ (first at row {r}, col {c})",
                s.nonfinite_mismatches
            ));
        }
        // NaN (no finite value to judge by) fails too
        if s.rel_l2.is_nan() || s.rel_l2 > self.rel_l2 {
            return Some(format!("rel L2 {:.3e} > {:.3e}", s.rel_l2, self.rel_l2));
        }
        if let Some(mc) = self.min_cosine
            && (s.cosine.is_nan() || s.cosine < mc)
        {
            return Some(format!("cosine {:.6} < {mc}", s.cosine));
        }
        None
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: rel L2 <= {:.3e}", self.name, self.rel_l2)?;
        if let Some(c) = self.min_cosine {
            write!(f, ", cosine >= {c}")?;
        }
        if let Some(sd) = self.self_disagreement {
            write!(f, " (upstream self-disagreement {sd:.3e})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_vs_upstream_scales_with_self_disagreement() {
        assert_eq!(Preset::F32VsUpstream.tolerance(None).rel_l2, 1e-5);
        assert_eq!(Preset::F32VsUpstream.tolerance(Some(2e-6)).rel_l2, 1e-5);
        let t = Preset::F32VsUpstream.tolerance(Some(8.5e-6)).rel_l2;
        assert!((t - 2.55e-5).abs() < 1e-18);
    }

    #[test]
    fn presets_round_trip_by_name() {
        for p in Preset::ALL {
            assert_eq!(Preset::parse(p.name()).unwrap(), p);
        }
        assert!(Preset::parse("loose").is_err());
        assert!(Tolerance::rtol(f64::NAN).is_err());
    }

    #[test]
    fn bf16_needs_cosine_too() {
        let t = Preset::GpuBf16.tolerance(None);
        let mut s = crate::metrics::compare(&[1.0, 0.0], &[1.0, 0.0], 2);
        assert!(t.check(&s).is_none());
        s.cosine = 0.99;
        assert!(t.check(&s).unwrap().contains("cosine"));
    }
}
