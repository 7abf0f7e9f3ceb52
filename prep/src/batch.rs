//! A processed batch and its safetensors form (TAPS.md section 3): `pixel_values` [N, 1176] F32
//! + `image_grid_thw` [I, 3] I64, and for videos `pixel_values_videos` + `video_grid_thw`.

use crate::error::{PrepError, Result};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Everything the tower eats, in processor order: images, then videos.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PixelBatch {
    /// Values per row (1176 with upstream's defaults).
    pub patch_dim: usize,
    /// Image rows, `[sum t*h*w over image_grid_thw, patch_dim]` row-major. A reader may also find
    /// videos packed here (rows with t > 1).
    pub pixel_values: Vec<f32>,
    /// One `[t, h, w]` per image.
    pub image_grid_thw: Vec<[i64; 3]>,
    /// Video rows, `[sum t*h*w over video_grid_thw, patch_dim]`.
    pub pixel_values_videos: Vec<f32>,
    /// One `[t, h, w]` per video.
    pub video_grid_thw: Vec<[i64; 3]>,
}

/// Rows a list of grids needs: the sum of `t*h*w`; `None` when an entry is not positive or the
/// sum overflows (a hostile `--pixels` file must not wrap around to a plausible row count).
pub fn rows_of(grids: &[[i64; 3]]) -> Option<i64> {
    grids.iter().try_fold(0i64, |acc, g| {
        if g.iter().any(|&v| v <= 0) {
            return None;
        }
        g[0].checked_mul(g[1])?.checked_mul(g[2])?.checked_add(acc)
    })
}

impl PixelBatch {
    /// An empty batch with rows of `patch_dim` values.
    pub fn new(patch_dim: usize) -> Self {
        PixelBatch {
            patch_dim,
            ..Default::default()
        }
    }

    /// Image rows (`pixel_values.len() / patch_dim`).
    pub fn image_rows(&self) -> usize {
        self.pixel_values
            .len()
            .checked_div(self.patch_dim)
            .unwrap_or(0)
    }

    /// Video rows.
    pub fn video_rows(&self) -> usize {
        self.pixel_values_videos
            .len()
            .checked_div(self.patch_dim)
            .unwrap_or(0)
    }

    /// Checks that every part's rows equal the sum of `t*h*w` of its grids and that grid entries
    /// are positive. `what` names the batch in messages.
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |m: String| Err(PrepError::InvalidOption(format!("{what}: {m}")));
        if self.patch_dim == 0
            && !(self.pixel_values.is_empty() && self.pixel_values_videos.is_empty())
        {
            return bad("patch_dim is 0".into());
        }
        for (vals, grids, vname, gname) in [
            (
                &self.pixel_values,
                &self.image_grid_thw,
                "pixel_values",
                "image_grid_thw",
            ),
            (
                &self.pixel_values_videos,
                &self.video_grid_thw,
                "pixel_values_videos",
                "video_grid_thw",
            ),
        ] {
            if let Some((i, g)) = grids
                .iter()
                .enumerate()
                .find(|(_, g)| g.iter().any(|&d| d <= 0))
            {
                return bad(format!("{gname}[{i}] = {g:?} has a non-positive entry"));
            }
            if self.patch_dim > 0 && vals.len() % self.patch_dim != 0 {
                return bad(format!(
                    "{vname} holds {} values, not a multiple of {}",
                    vals.len(),
                    self.patch_dim
                ));
            }
            let rows = vals.len().checked_div(self.patch_dim).unwrap_or(0) as i64;
            let Some(want) = rows_of(grids) else {
                return bad(format!(
                    "{gname} has a non-positive entry or its t*h*w sum overflows: {grids:?}"
                ));
            };
            if rows != want {
                return bad(format!(
                    "{vname} has {rows} rows but {gname} ({} entries) sums t*h*w to {want}",
                    grids.len()
                ));
            }
        }
        Ok(())
    }

    /// Appends another batch after this one (images after images, videos after videos).
    pub fn extend(&mut self, other: PixelBatch) -> Result<()> {
        if self.patch_dim != other.patch_dim && self.patch_dim != 0 && other.patch_dim != 0 {
            return Err(PrepError::InvalidOption(format!(
                "cannot join batches with rows of {} and {} values",
                self.patch_dim, other.patch_dim
            )));
        }
        self.patch_dim = self.patch_dim.max(other.patch_dim);
        self.pixel_values.extend(other.pixel_values);
        self.image_grid_thw.extend(other.image_grid_thw);
        self.pixel_values_videos.extend(other.pixel_values_videos);
        self.video_grid_thw.extend(other.video_grid_thw);
        Ok(())
    }
}

fn grid_bytes(g: &[[i64; 3]]) -> Vec<u8> {
    g.iter().flatten().flat_map(|v| v.to_le_bytes()).collect()
}

fn write_err(path: &Path, detail: impl std::fmt::Display) -> PrepError {
    PrepError::Write {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}

/// Writes `batch` as TAPS.md section 3 describes: the image pair when there are images, the
/// video pair when there are videos. The file is written next to `path` under a temporary name
/// and renamed, so no partial file is ever left at `path`.
pub fn write_prep_safetensors(path: impl AsRef<Path>, batch: &PixelBatch) -> Result<()> {
    let path = path.as_ref();
    batch.validate(&path.display().to_string())?;
    let pv: Vec<u8> = bytemuck::cast_slice(&batch.pixel_values).to_vec();
    let pvv: Vec<u8> = bytemuck::cast_slice(&batch.pixel_values_videos).to_vec();
    let (ig, vg) = (
        grid_bytes(&batch.image_grid_thw),
        grid_bytes(&batch.video_grid_thw),
    );
    let mut tensors: Vec<(&str, TensorView<'_>)> = Vec::new();
    let view = |dtype, shape: Vec<usize>, data| {
        TensorView::new(dtype, shape, data).map_err(|e| write_err(path, e))
    };
    if !batch.image_grid_thw.is_empty() {
        tensors.push((
            "pixel_values",
            view(Dtype::F32, vec![batch.image_rows(), batch.patch_dim], &pv)?,
        ));
        tensors.push((
            "image_grid_thw",
            view(Dtype::I64, vec![batch.image_grid_thw.len(), 3], &ig)?,
        ));
    }
    if !batch.video_grid_thw.is_empty() {
        tensors.push((
            "pixel_values_videos",
            view(Dtype::F32, vec![batch.video_rows(), batch.patch_dim], &pvv)?,
        ));
        tensors.push((
            "video_grid_thw",
            view(Dtype::I64, vec![batch.video_grid_thw.len(), 3], &vg)?,
        ));
    }
    if tensors.is_empty() {
        return Err(write_err(path, "the batch holds no image and no video"));
    }
    let meta = HashMap::from([(
        "producer".to_string(),
        format!("glm5v-prep {}", env!("CARGO_PKG_VERSION")),
    )]);
    let bytes = safetensors::serialize(tensors, Some(meta)).map_err(|e| write_err(path, e))?;

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| write_err(path, "the path names no file"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(write_err(path, e));
    }
    Ok(())
}

fn read_err(path: &Path, detail: impl std::fmt::Display) -> PrepError {
    PrepError::InvalidOption(format!("{}: {detail}", path.display()))
}

/// A 2-D F32 tensor's shape and values.
fn read_f32(
    st: &SafeTensors<'_>,
    name: &str,
    path: &Path,
) -> Result<Option<(usize, usize, Vec<f32>)>> {
    let t = match st.tensor(name) {
        Ok(t) => t,
        Err(safetensors::SafeTensorError::TensorNotFound(_)) => return Ok(None),
        Err(e) => return Err(read_err(path, format!("tensor `{name}`: {e}"))),
    };
    if t.dtype() != Dtype::F32 {
        return Err(read_err(
            path,
            format!("tensor `{name}` is {:?}, expected F32", t.dtype()),
        ));
    }
    let &[rows, cols] = t.shape() else {
        return Err(read_err(
            path,
            format!(
                "tensor `{name}` has shape {:?}, expected [rows, patch_dim]",
                t.shape()
            ),
        ));
    };
    let vals = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Some((rows, cols, vals)))
}

/// An `[n, 3]` integer grid tensor (I64, or I32 widened).
fn read_grid(st: &SafeTensors<'_>, name: &str, path: &Path) -> Result<Option<Vec<[i64; 3]>>> {
    let t = match st.tensor(name) {
        Ok(t) => t,
        Err(safetensors::SafeTensorError::TensorNotFound(_)) => return Ok(None),
        Err(e) => return Err(read_err(path, format!("tensor `{name}`: {e}"))),
    };
    let &[_, 3] = t.shape() else {
        return Err(read_err(
            path,
            format!("tensor `{name}` has shape {:?}, expected [n, 3]", t.shape()),
        ));
    };
    let vals: Vec<i64> = match t.dtype() {
        Dtype::I64 => t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
        Dtype::I32 => t
            .data()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")) as i64)
            .collect(),
        d => {
            return Err(read_err(
                path,
                format!("tensor `{name}` is {d:?}, expected I64"),
            ));
        }
    };
    Ok(Some(
        vals.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
    ))
}

/// Reads a preprocessed-inputs file: images, videos, or both; videos packed into
/// `pixel_values` / `image_grid_thw` (rows with t > 1) stay where they are, since the tower
/// treats every grid row alike. Each values tensor needs its grid tensor and vice versa; rows
/// must equal the sum of `t*h*w`; both parts must share `patch_dim`.
pub fn read_prep_safetensors(path: impl AsRef<Path>) -> Result<PixelBatch> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| PrepError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| read_err(path, format!("not a safetensors file: {e}")))?;
    let mut b = PixelBatch::default();
    let mut dims = Vec::new();
    for (vname, gname, video) in [
        ("pixel_values", "image_grid_thw", false),
        ("pixel_values_videos", "video_grid_thw", true),
    ] {
        let vals = read_f32(&st, vname, path)?;
        let grid = read_grid(&st, gname, path)?;
        match (vals, grid) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(read_err(
                    path,
                    format!("`{vname}` is present but `{gname}` is missing"),
                ));
            }
            (None, Some(_)) => {
                return Err(read_err(
                    path,
                    format!("`{gname}` is present but `{vname}` is missing"),
                ));
            }
            (Some((rows, cols, v)), Some(g)) => {
                let Some(want) = rows_of(&g) else {
                    return Err(read_err(
                        path,
                        format!(
                            "`{gname}` has a non-positive entry or its t*h*w sum overflows: {g:?}"
                        ),
                    ));
                };
                if rows as i64 != want {
                    return Err(read_err(
                        path,
                        format!("`{vname}` has {rows} rows but `{gname}` sums t*h*w to {want}"),
                    ));
                }
                dims.push((vname, cols));
                if video {
                    b.pixel_values_videos = v;
                    b.video_grid_thw = g;
                } else {
                    b.pixel_values = v;
                    b.image_grid_thw = g;
                }
            }
        }
    }
    match dims.as_slice() {
        [] => {
            return Err(read_err(
                path,
                "holds neither `pixel_values` + `image_grid_thw` nor `pixel_values_videos` + `video_grid_thw`",
            ));
        }
        [(_, d)] => b.patch_dim = *d,
        [(a, d1), (c, d2)] => {
            if d1 != d2 {
                return Err(read_err(
                    path,
                    format!("`{a}` rows have {d1} values but `{c}` rows have {d2}"),
                ));
            }
            b.patch_dim = *d1;
        }
        _ => unreachable!("two parts at most"),
    }
    b.validate(&path.display().to_string())?;
    Ok(b)
}
