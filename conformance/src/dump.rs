//! Reading a tap dump (the tap-dump layout: docs/CONFORMANCE.md, "File formats"): one safetensors file of 2-D taps, the inputs
//! (`pixel_values`, `image_grid_thw`, video counterparts) and `__metadata__`.
//!
//! The file is read once into memory; tap values are converted to f64 only when a tap is compared,
//! so a dump of a full-depth forward costs its file size plus two taps at a time.

use crate::error::{ConformanceError, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Names that hold the batch layout, not a tap.
pub const GRID_NAMES: [&str; 2] = ["image_grid_thw", "video_grid_thw"];

/// One tensor of the file, not yet decoded.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    range: Range<usize>,
}

/// A tap dump held in memory.
#[derive(Debug)]
pub struct TapDump {
    pub path: PathBuf,
    pub metadata: HashMap<String, String>,
    entries: BTreeMap<String, Entry>,
    bytes: Vec<u8>,
}

/// The batch layout of a dump: image grids first, then video grids, as the tower packs them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// `[t, h, w]` per image.
    pub images: Vec<[i64; 3]>,
    /// `[t, h, w]` per video.
    pub videos: Vec<[i64; 3]>,
}

impl TapDump {
    /// Reads and validates the safetensors header of `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| ConformanceError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(path, bytes)
    }

    /// As [`TapDump::open`], from bytes already in memory (`path` names them in messages).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let not_st = |detail: String| ConformanceError::NotSafetensors {
            path: path.to_path_buf(),
            detail,
        };
        let (header_len, meta) =
            SafeTensors::read_metadata(&bytes).map_err(|e| not_st(e.to_string()))?;
        let base = 8 + header_len;
        let entries = meta
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (lo, hi) = info.data_offsets;
                (
                    name,
                    Entry {
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        range: base + lo..base + hi,
                    },
                )
            })
            .collect();
        let metadata = meta.metadata().clone().unwrap_or_default();
        Ok(Self {
            path: path.to_path_buf(),
            metadata,
            entries,
            bytes,
        })
    }

    /// Every tensor name with its header entry, sorted by name.
    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Whether `name` is something to compare as a tap: a floating tensor that is not a grid.
    pub fn is_tap(&self, name: &str) -> bool {
        self.entries.get(name).is_some_and(|e| is_float(e.dtype)) && !GRID_NAMES.contains(&name)
    }

    /// A tap's values in f64 with its `[rows, cols]`. F32, F64, F16 and BF16 are accepted.
    pub fn tap(&self, name: &str) -> Result<(Vec<usize>, Vec<f64>)> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| ConformanceError::Missing {
                path: self.path.clone(),
                name: name.into(),
            })?;
        if entry.shape.len() != 2 {
            return Err(ConformanceError::TapRank {
                path: self.path.clone(),
                name: name.into(),
                shape: entry.shape.clone(),
            });
        }
        let raw = &self.bytes[entry.range.clone()];
        let values = decode_float(entry.dtype, raw).ok_or_else(|| ConformanceError::TapDtype {
            path: self.path.clone(),
            name: name.into(),
            dtype: format!("{:?}", entry.dtype),
        })?;
        Ok((entry.shape.clone(), values))
    }

    /// An integer `[n, 3]` grid tensor, `None` when absent.
    pub fn grid(&self, name: &str) -> Result<Option<Vec<[i64; 3]>>> {
        let Some(entry) = self.entries.get(name) else {
            return Ok(None);
        };
        let bad = || ConformanceError::BadGrid {
            path: self.path.clone(),
            name: name.into(),
            dtype: format!("{:?}", entry.dtype),
            shape: entry.shape.clone(),
        };
        if entry.shape.len() != 2 || entry.shape[1] != 3 {
            return Err(bad());
        }
        let raw = &self.bytes[entry.range.clone()];
        let flat: Vec<i64> = match entry.dtype {
            Dtype::I64 => raw
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            Dtype::I32 => raw
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
            _ => return Err(bad()),
        };
        Ok(Some(
            flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
        ))
    }

    /// The batch layout from `image_grid_thw` / `video_grid_thw`, `None` when neither is present.
    pub fn layout(&self) -> Result<Option<Layout>> {
        let images = self.grid("image_grid_thw")?;
        let videos = self.grid("video_grid_thw")?;
        if images.is_none() && videos.is_none() {
            return Ok(None);
        }
        Ok(Some(Layout {
            images: images.unwrap_or_default(),
            videos: videos.unwrap_or_default(),
        }))
    }

    /// `self_disagreement` from the metadata, when present and a finite non-negative number.
    pub fn self_disagreement(&self) -> Option<f64> {
        self.metadata
            .get("self_disagreement")?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
    }
}

fn is_float(d: Dtype) -> bool {
    matches!(d, Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::BF16)
}

/// Little-endian float bytes to f64; `None` for a non-float dtype.
fn decode_float(dtype: Dtype, raw: &[u8]) -> Option<Vec<f64>> {
    Some(match dtype {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F64 => raw
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
            .collect(),
        _ => return None,
    })
}

impl Layout {
    /// Patches of the whole batch (`N` of TAPS.md).
    pub fn patches(&self) -> i64 {
        self.images
            .iter()
            .chain(&self.videos)
            .map(|g| g[0] * g[1] * g[2])
            .sum()
    }

    /// Where row `row` of a tap with `rows` rows sits in the batch: patch-level taps have `N` rows,
    /// merged taps (downsample, merger.*) `N / 4`. `None` when `rows` is neither.
    pub fn locate(&self, row: usize, rows: usize) -> Option<RowLocation> {
        let n = usize::try_from(self.patches()).ok()?;
        let merged = if rows == n {
            false
        } else if rows * 4 == n {
            true
        } else {
            return None;
        };
        let per = if merged { 4 } else { 1 };
        let mut start = 0usize;
        let grids = self
            .images
            .iter()
            .map(|g| (false, g))
            .chain(self.videos.iter().map(|g| (true, g)));
        let (mut image_i, mut video_i) = (0usize, 0usize);
        for (is_video, g) in grids {
            let (t, h, w) = (g[0] as usize, g[1] as usize, g[2] as usize);
            let frame_rows = h * w / per;
            let item_rows = t * frame_rows;
            if row < start + item_rows {
                let in_item = row - start;
                let frame = in_item / frame_rows;
                let p = in_item % frame_rows;
                // Block-major order: 4 consecutive patches form one 2x2 merge block.
                let blocks_per_row = (w / 2).max(1);
                let (pr, pc) = if merged {
                    (p / blocks_per_row, p % blocks_per_row)
                } else {
                    let (block, inner) = (p / 4, p % 4);
                    (
                        (block / blocks_per_row) * 2 + inner / 2,
                        (block % blocks_per_row) * 2 + inner % 2,
                    )
                };
                let (kind, index) = if is_video {
                    ("video", video_i)
                } else {
                    ("image", image_i)
                };
                return Some(RowLocation {
                    kind,
                    index,
                    frame_pair: frame,
                    row_in_item: in_item,
                    grid_pos: [pr, pc],
                    merged,
                });
            }
            start += item_rows;
            if is_video {
                video_i += 1;
            } else {
                image_i += 1;
            }
        }
        None
    }
}

/// Which input of a batch a tap row belongs to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RowLocation {
    /// "image" or "video".
    pub kind: &'static str,
    /// Index among the images (or among the videos) of the batch.
    pub index: usize,
    /// Temporal patch (frame pair) inside the item; 0 for an image.
    pub frame_pair: usize,
    /// Row index inside the item.
    pub row_in_item: usize,
    /// `[row, col]` on the patch grid (patch-level taps) or on the merged grid (merged taps).
    pub grid_pos: [usize; 2],
    /// Whether the tap is merged (one row per 2x2 block).
    pub merged: bool,
}

impl std::fmt::Display for RowLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.index)?;
        if self.kind == "video" || self.frame_pair > 0 {
            write!(f, " frame pair {}", self.frame_pair)?;
        }
        let what = if self.merged { "merged token" } else { "patch" };
        write!(f, " {what} ({}, {})", self.grid_pos[0], self.grid_pos[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_patch_and_merged_rows() {
        // image 0: 1x2x4 (8 patches), video 0: 2x2x2 (2 frame pairs of 4 patches)
        let l = Layout {
            images: vec![[1, 2, 4]],
            videos: vec![[2, 2, 2]],
        };
        assert_eq!(l.patches(), 16);
        // patch row 5 = block 1, inner 1 -> grid (0, 3)
        let r = l.locate(5, 16).unwrap();
        assert_eq!(
            (r.kind, r.index, r.frame_pair, r.grid_pos),
            ("image", 0, 0, [0, 3])
        );
        // patch row 14 = video row 6 = frame pair 1, inner 2 -> (1, 0)
        let r = l.locate(14, 16).unwrap();
        assert_eq!(
            (r.kind, r.index, r.frame_pair, r.grid_pos),
            ("video", 0, 1, [1, 0])
        );
        // merged rows: 4 in total: image has 2, video 1 per frame pair
        let r = l.locate(3, 4).unwrap();
        assert_eq!(
            (r.kind, r.frame_pair, r.grid_pos, r.merged),
            ("video", 1, [0, 0], true)
        );
        assert!(l.locate(0, 7).is_none());
    }
}
