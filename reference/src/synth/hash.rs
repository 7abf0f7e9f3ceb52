//! The content hash of a synthetic checkpoint (defined in the `synth` module docs): of
//! `(name, dtype, shape, bytes)` records, and of every tensor in a checkpoint directory, whatever
//! its file layout.

use super::checkpoint::weight_files;
use super::{SynthError, io_err};
use rayon::prelude::*;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn dtype_name(d: Dtype) -> String {
    format!("{d:?}")
}

/// The content hash (module docs) of `(name, dtype, shape, bytes)` records, in any order.
pub fn content_sha256<'a, I>(tensors: I) -> String
where
    I: IntoIterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>,
{
    let mut recs: Vec<(&str, Dtype, &[usize], &[u8])> = tensors.into_iter().collect();
    recs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let digests: Vec<[u8; 32]> = recs
        .par_iter()
        .map(|r| Sha256::digest(r.3).into())
        .collect();
    let mut h = Sha256::new();
    for ((name, dtype, shape, _), digest) in recs.iter().zip(&digests) {
        let dt = dtype_name(*dtype);
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((dt.len() as u64).to_le_bytes());
        h.update(dt.as_bytes());
        h.update((shape.len() as u64).to_le_bytes());
        for d in shape.iter() {
            h.update((*d as u64).to_le_bytes());
        }
        h.update(digest);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The content hash (module docs) of every tensor in a checkpoint directory.
pub fn checkpoint_content_sha256(dir: &Path) -> Result<String, SynthError> {
    let files = weight_files(dir)?;
    let buffers: Vec<(PathBuf, Vec<u8>)> = files
        .into_iter()
        .map(|p| {
            std::fs::read(&p)
                .map(|b| (p.clone(), b))
                .map_err(io_err(&p))
        })
        .collect::<Result<_, _>>()?;
    let mut parsed = Vec::with_capacity(buffers.len());
    for (p, b) in &buffers {
        let st = SafeTensors::deserialize(b).map_err(|source| SynthError::Safetensors {
            path: p.display().to_string(),
            source,
        })?;
        parsed.push(st);
    }
    let views: Vec<(&str, TensorView<'_>)> = parsed.iter().flat_map(|st| st.iter()).collect();
    Ok(content_sha256(
        views
            .iter()
            .map(|(name, v)| (*name, v.dtype(), v.shape(), v.data())),
    ))
}
