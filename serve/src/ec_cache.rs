//! The hand-off to vLLM's disaggregated encoder: each input's embeddings as
//! `DIR/<key>/encoder_cache.safetensors`, one tensor `ec_cache` `[tokens, out_hidden_size]`,
//! the layout vLLM's `ECExampleConnector` saves and its consumer loads
//! (`safetensors.torch.load_file(path)["ec_cache"]`). Each file is written under a temporary
//! name in its folder and renamed, so a reader never sees half a file.

use crate::api::WireDtype;
use ndarray::ArrayView2;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file an input's embeddings go to.
pub const FILE_NAME: &str = "encoder_cache.safetensors";

/// A key made from the input's bytes when the request gives no `uuid`: sha256, hex.
pub fn content_key(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a client's `uuid` can name a folder: 1 to 200 of `[A-Za-z0-9._:-]`, not `.`/`..`.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 200
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Writes `rows` as `dir/key/encoder_cache.safetensors` in `dtype`; returns the path.
pub fn write(
    dir: &Path,
    key: &str,
    rows: ArrayView2<f32>,
    dtype: WireDtype,
) -> std::io::Result<PathBuf> {
    let folder = dir.join(key);
    std::fs::create_dir_all(&folder)?;
    let rows = rows.as_standard_layout();
    let bytes = dtype.le_bytes(rows.as_slice().expect("standard layout"));
    let view = safetensors::tensor::TensorView::new(
        dtype.safetensors(),
        vec![rows.nrows(), rows.ncols()],
        &bytes,
    )
    .map_err(std::io::Error::other)?;
    let data = safetensors::serialize([("ec_cache", view)], None).map_err(std::io::Error::other)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".encoder_cache-")
        .suffix(".part")
        .tempfile_in(&folder)?;
    tmp.write_all(&data)?;
    tmp.as_file().sync_all()?;
    let dest = folder.join(FILE_NAME);
    tmp.persist(&dest).map_err(|e| e.error)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644));
    }
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(valid_key("img-1.a:b_c"));
        for bad in ["", ".", "..", "a/b", "a b", "é"] {
            assert!(!valid_key(bad), "{bad:?}");
        }
        assert_eq!(
            content_key(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
