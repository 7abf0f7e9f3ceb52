//! Writing outputs all at once: a temporary file in the destination's directory, renamed into place
//! only when complete.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The directory `dest` will be written in; an error naming `dest` when it does not exist.
pub fn check_dir(dest: &Path) -> Result<PathBuf> {
    let dir = parent_dir(dest);
    if !dir.is_dir() {
        anyhow::bail!(
            "cannot write {}: directory {} does not exist",
            dest.display(),
            dir.display()
        );
    }
    if dest.is_dir() {
        anyhow::bail!("cannot write {}: it is a directory", dest.display());
    }
    Ok(dir)
}

/// A temporary path beside `path` (same directory, so the final rename is atomic) that the caller
/// fills; [`Staged::commit`] renames it into place, dropping it uncommitted removes it.
pub struct Staged {
    temp: tempfile::TempPath,
    dest: PathBuf,
}

impl Staged {
    pub fn new(dest: &Path) -> Result<Self> {
        let dir = check_dir(dest)?;
        let temp = tempfile::Builder::new()
            .prefix(".glm5v-")
            .suffix(".part")
            .tempfile_in(&dir)
            .with_context(|| format!("cannot write {}", dest.display()))?
            .into_temp_path();
        Ok(Self {
            temp,
            dest: dest.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.temp
    }

    pub fn commit(self) -> Result<()> {
        let dest = self.dest.clone();
        // tempfile creates 0600; an output should get the usual 0644
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.temp, std::fs::Permissions::from_mode(0o644));
        }
        self.temp
            .persist(&dest)
            .map_err(|e| e.error)
            .with_context(|| format!("cannot write {}", dest.display()))
    }
}

/// Writes `bytes` to `dest` atomically.
pub fn write_bytes(dest: &Path, bytes: &[u8]) -> Result<()> {
    let staged = Staged::new(dest)?;
    {
        let mut f = std::fs::File::create(staged.path())
            .with_context(|| format!("cannot write {}", dest.display()))?;
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write {}", dest.display()))?;
    }
    staged.commit()
}

/// Writes `glm5v embed`'s safetensors file: `embeddings` [tokens, hidden] F32, the grids
/// (`image_grid_thw`, and `video_grid_thw` when there are videos) as I64 [n, 3], and the
/// metadata (producer, version, precision, checkpoint, one item per input).
#[allow(clippy::too_many_arguments)]
pub fn write_embeddings(
    dest: &Path,
    values: &[f32],
    hidden: usize,
    image_grids: &[i64],
    video_grids: &[i64],
    items: Vec<serde_json::Value>,
    precision: &str,
    checkpoint: &str,
) -> Result<()> {
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;
    let rows = values.len() / hidden.max(1);
    let e_bytes: &[u8] = bytemuck::cast_slice(values);
    let img: Vec<u8> = image_grids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let vid: Vec<u8> = video_grids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut views = vec![(
        "embeddings".to_string(),
        TensorView::new(Dtype::F32, vec![rows, hidden], e_bytes)?,
    )];
    if !image_grids.is_empty() || video_grids.is_empty() {
        views.push((
            "image_grid_thw".into(),
            TensorView::new(Dtype::I64, vec![image_grids.len() / 3, 3], &img)?,
        ));
    }
    if !video_grids.is_empty() {
        views.push((
            "video_grid_thw".into(),
            TensorView::new(Dtype::I64, vec![video_grids.len() / 3, 3], &vid)?,
        ));
    }
    let mut meta = std::collections::HashMap::new();
    meta.insert("producer".to_string(), "glm5v".to_string());
    meta.insert("version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    meta.insert("precision".to_string(), precision.to_string());
    meta.insert("checkpoint".to_string(), checkpoint.to_string());
    meta.insert(
        "items".to_string(),
        serde_json::Value::Array(items).to_string(),
    );
    let bytes = safetensors::serialize(views, Some(meta))?;
    write_bytes(dest, &bytes)
}
