//! The numbers one tap comparison produces. Everything is accumulated in f64 whatever the dump
//! dtype, so the metric itself adds no error worth naming.

use serde::Serialize;

/// How a non-finite value is classified: positions and classes must agree on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NonFinite {
    Nan,
    PosInf,
    NegInf,
}

fn class(x: f64) -> Option<NonFinite> {
    if x.is_nan() {
        Some(NonFinite::Nan)
    } else if x == f64::INFINITY {
        Some(NonFinite::PosInf)
    } else if x == f64::NEG_INFINITY {
        Some(NonFinite::NegInf)
    } else {
        None
    }
}

/// The element where two taps differ most.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Worst {
    pub row: usize,
    pub col: usize,
    /// Value on side A (the candidate).
    pub a: f64,
    /// Value on side B (the reference).
    pub b: f64,
}

/// The statistics of one tap, A (candidate) against B (reference).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub elements: usize,
    /// Positions where exactly one side is non-finite, or both are but of a different class.
    pub nonfinite_mismatches: usize,
    /// The first such position (row, col), if any.
    pub first_nonfinite_mismatch: Option<[usize; 2]>,
    /// Positions where both sides hold the same non-finite value (left out of the numbers).
    pub nonfinite_shared: usize,
    /// max |a - b| over positions finite on both sides.
    pub max_abs: f64,
    /// ||a - b|| / ||b|| (0 when both are zero, +inf when only b is).
    pub rel_l2: f64,
    /// <a, b> / (||a|| ||b||) (1 when both are zero, 0 when only one is).
    pub cosine: f64,
    /// max |b|, to read `max_abs` against.
    pub max_abs_ref: f64,
    /// `None` when the taps agree exactly (on the finite positions).
    pub worst: Option<Worst>,
}

/// Compares `a` against the reference `b`, both row-major `[rows, cols]` of equal length.
///
/// # Panics
/// When the two slices differ in length or `cols` is 0 with data present (callers check shapes).
pub fn compare(a: &[f64], b: &[f64], cols: usize) -> Stats {
    assert_eq!(a.len(), b.len(), "compare: lengths differ");
    let cols = cols.max(1);
    let (mut d2, mut b2, mut a2, mut ab) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let (mut max_abs, mut max_abs_ref) = (0.0f64, 0.0f64);
    let mut worst: Option<Worst> = None;
    let (mut mism, mut shared) = (0usize, 0usize);
    let mut first_mism = None;
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        match (class(x), class(y)) {
            (None, None) => {
                let d = x - y;
                d2 += d * d;
                b2 += y * y;
                a2 += x * x;
                ab += x * y;
                max_abs_ref = max_abs_ref.max(y.abs());
                if d.abs() > max_abs {
                    max_abs = d.abs();
                    worst = Some(Worst {
                        row: i / cols,
                        col: i % cols,
                        a: x,
                        b: y,
                    });
                }
            }
            (cx, cy) if cx == cy => shared += 1,
            _ => {
                mism += 1;
                if first_mism.is_none() {
                    first_mism = Some([i / cols, i % cols]);
                }
            }
        }
    }
    let rel_l2 = if b2 > 0.0 {
        (d2 / b2).sqrt()
    } else if d2 == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    let cosine = if a2 == 0.0 && b2 == 0.0 {
        1.0
    } else if a2 == 0.0 || b2 == 0.0 {
        0.0
    } else {
        (ab / (a2.sqrt() * b2.sqrt())).clamp(-1.0, 1.0)
    };
    Stats {
        elements: a.len(),
        nonfinite_mismatches: mism,
        first_nonfinite_mismatch: first_mism,
        nonfinite_shared: shared,
        max_abs,
        rel_l2,
        cosine,
        max_abs_ref,
        worst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_relative_l2_and_cosine() {
        // b = (3, 4): ||b|| = 5; a = b + (0.3, -0.4): ||a-b|| = 0.5 -> rel 0.1
        let b = [3.0, 4.0];
        let a = [3.3, 3.6];
        let s = compare(&a, &b, 2);
        assert!((s.rel_l2 - 0.1).abs() < 1e-12, "{}", s.rel_l2);
        let cos = (3.3 * 3.0 + 3.6 * 4.0) / ((3.3f64 * 3.3 + 3.6 * 3.6).sqrt() * 5.0);
        assert!((s.cosine - cos).abs() < 1e-12);
        assert!((s.max_abs - 0.4).abs() < 1e-12);
        let w = s.worst.unwrap();
        assert_eq!((w.row, w.col), (0, 1));
    }

    #[test]
    fn worst_element_row_and_col() {
        let b = vec![0.0; 12];
        let mut a = b.clone();
        a[7] = -2.0; // row 1, col 3 of [3, 4]
        a[2] = 1.0;
        let s = compare(&a, &b, 4);
        let w = s.worst.unwrap();
        assert_eq!((w.row, w.col, w.a, w.b), (1, 3, -2.0, 0.0));
        assert_eq!(s.rel_l2, f64::INFINITY);
        assert_eq!(s.cosine, 0.0);
    }

    #[test]
    fn identical_zero_taps_pass_cleanly() {
        let s = compare(&[0.0; 4], &[0.0; 4], 2);
        assert_eq!((s.rel_l2, s.cosine, s.max_abs), (0.0, 1.0, 0.0));
    }

    #[test]
    fn nonfinite_positions_and_classes() {
        let b = [1.0, f64::NAN, f64::INFINITY, 2.0];
        // same NaN position, +inf vs -inf at 2, NaN where b is finite at 3
        let a = [1.0, f64::NAN, f64::NEG_INFINITY, f64::NAN];
        let s = compare(&a, &b, 2);
        assert_eq!(s.nonfinite_shared, 1);
        assert_eq!(s.nonfinite_mismatches, 2);
        assert_eq!(s.first_nonfinite_mismatch, Some([1, 0]));
        // numbers only over the one position finite on both sides
        assert_eq!(s.rel_l2, 0.0);
    }
}
