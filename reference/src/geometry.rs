//! Batch geometry from `grid_thw` (upstream `transformers/vision_utils.py`): attention segments
//! (`get_vision_cu_seqlens`) and rope position ids (`get_vision_position_ids`).

use crate::config::VisionConfig;
use crate::error::InputError;

/// One row of `image_grid_thw`: `[t, h, w]` in patches (t = frame pairs).
pub type Grid = [usize; 3];

/// `Ok` when a `[rows, cols]` input named `what` has the `expected` shape, else the shape error
/// naming it (for the stage methods of every [`crate::Tower`]).
pub fn check_shape(
    what: &str,
    found: (usize, usize),
    expected: (usize, usize),
) -> Result<(), InputError> {
    if found == expected {
        Ok(())
    } else {
        Err(InputError::Shape {
            what: what.into(),
            expected: vec![expected.0, expected.1],
            found: vec![found.0, found.1],
        })
    }
}

/// [`check_shape`] for any number of rows and `cols` columns.
pub fn check_cols(what: &str, found: (usize, usize), cols: usize) -> Result<(), InputError> {
    check_shape(what, found, (found.0, cols))
}

/// The downsample stage's input check: `[N, hidden_size]` with N a multiple of the merge unit.
pub fn check_downsample_input(cfg: &VisionConfig, found: (usize, usize)) -> Result<(), InputError> {
    check_cols("downsample input", found, cfg.hidden_size)?;
    let unit = cfg.merge_unit();
    if found.0.is_multiple_of(unit) {
        Ok(())
    } else {
        Err(InputError::Shape {
            what: format!("downsample input (rows must be a multiple of {unit})"),
            expected: vec![found.0.div_ceil(unit) * unit, cfg.hidden_size],
            found: vec![found.0, found.1],
        })
    }
}

/// Checks a grid list against the config: non-empty, positive, h and w multiples of the merge
/// size. Returns the total patch count (sum of t*h*w).
pub fn validate_grids(cfg: &VisionConfig, grid_thw: &[Grid]) -> Result<usize, InputError> {
    if grid_thw.is_empty() {
        return Err(InputError::Empty);
    }
    let m = cfg.spatial_merge_size;
    let mut total = 0usize;
    for (index, &[t, h, w]) in grid_thw.iter().enumerate() {
        if t == 0 || h == 0 || w == 0 {
            return Err(InputError::EmptyGrid { index, t, h, w });
        }
        if h % m != 0 || w % m != 0 {
            return Err(InputError::Merge {
                index,
                t,
                h,
                w,
                merge: m,
            });
        }
        total = t
            .checked_mul(h)
            .and_then(|p| p.checked_mul(w))
            .and_then(|p| p.checked_add(total))
            .ok_or(InputError::GridOverflow { index, t, h, w })?;
    }
    Ok(total)
}

/// Checks `pixel_values` `[rows, cols]` against the grids and the config.
pub fn validate_pixels(
    cfg: &VisionConfig,
    rows: usize,
    cols: usize,
    grid_thw: &[Grid],
) -> Result<(), InputError> {
    if cols != cfg.patch_dim() {
        return Err(InputError::PatchDim {
            found: cols,
            expected: cfg.patch_dim(),
        });
    }
    let expected = validate_grids(cfg, grid_thw)?;
    if rows != expected {
        return Err(InputError::Rows {
            found: rows,
            expected,
        });
    }
    Ok(())
}

/// Segment boundaries: `[0, h*w, 2*h*w, ...]`, one segment per image and per frame pair.
pub fn cu_seqlens(grid_thw: &[Grid]) -> Vec<usize> {
    let mut cu = vec![0];
    for &[t, h, w] in grid_thw {
        for _ in 0..t {
            cu.push(cu.last().unwrap() + h * w);
        }
    }
    cu
}

/// Checks segment boundaries given to a block: start at 0, never decrease, end at `tokens`.
pub fn validate_cu_seqlens(cu: &[usize], tokens: usize) -> Result<(), InputError> {
    let ok =
        cu.first() == Some(&0) && cu.last() == Some(&tokens) && cu.windows(2).all(|p| p[0] <= p[1]);
    if ok {
        Ok(())
    } else {
        Err(InputError::Segments {
            found: cu.to_vec(),
            tokens,
        })
    }
}

/// Rope position ids `(h, w)` per token: within a frame, merge blocks in row-major order, the
/// `merge x merge` patches of a block row-major inside it; repeated for each of the t frames.
pub fn positions(grid_thw: &[Grid], merge: usize) -> Vec<[usize; 2]> {
    let mut out = Vec::new();
    for &[t, h, w] in grid_thw {
        let mut frame = Vec::with_capacity(h * w);
        for bh in 0..h / merge {
            for bw in 0..w / merge {
                for ih in 0..merge {
                    for iw in 0..merge {
                        frame.push([bh * merge + ih, bw * merge + iw]);
                    }
                }
            }
        }
        for _ in 0..t {
            out.extend_from_slice(&frame);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_and_positions_follow_upstream() {
        let grids = [[1, 2, 4], [2, 2, 2]];
        assert_eq!(cu_seqlens(&grids), vec![0, 8, 12, 16]);
        let p = positions(&grids, 2);
        assert_eq!(p.len(), 16);
        // first image: blocks (0,0) then (0,1), each 2x2 row-major
        assert_eq!(
            &p[..8],
            &[
                [0, 0],
                [0, 1],
                [1, 0],
                [1, 1],
                [0, 2],
                [0, 3],
                [1, 2],
                [1, 3]
            ]
        );
        // the video repeats its frame positions t times
        assert_eq!(&p[8..12], &p[12..16]);
        assert_eq!(&p[8..12], &[[0, 0], [0, 1], [1, 0], [1, 1]]);
    }

    #[test]
    fn bad_grids_are_typed_errors() {
        let cfg = VisionConfig::default();
        assert_eq!(validate_grids(&cfg, &[]), Err(InputError::Empty));
        assert!(matches!(
            validate_grids(&cfg, &[[1, 3, 4]]),
            Err(InputError::Merge { index: 0, .. })
        ));
        assert!(matches!(
            validate_grids(&cfg, &[[1, 2, 2], [0, 2, 2]]),
            Err(InputError::EmptyGrid { index: 1, .. })
        ));
        assert_eq!(
            validate_pixels(&cfg, 5, 1176, &[[1, 2, 2]]),
            Err(InputError::Rows {
                found: 5,
                expected: 4
            })
        );
        assert_eq!(
            validate_pixels(&cfg, 4, 1000, &[[1, 2, 2]]),
            Err(InputError::PatchDim {
                found: 1000,
                expected: 1176
            })
        );
        assert!(validate_cu_seqlens(&[0, 3, 2, 4], 4).is_err());
        assert!(validate_cu_seqlens(&[0, 2, 4], 4).is_ok());
    }
}
