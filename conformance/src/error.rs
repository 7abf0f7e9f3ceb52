//! The one error type of the `conformance` crate. Every message names the file it is about.

use std::path::PathBuf;

/// What can go wrong reading or comparing tap dumps and running fixtures.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a safetensors file: {detail}")]
    NotSafetensors { path: PathBuf, detail: String },
    #[error(
        "{path}: tensor `{name}` has dtype {dtype}, a tap must be F32 (F64, F16 and BF16 are converted)"
    )]
    TapDtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("{path}: tensor `{name}` has shape {shape:?}, a tap must be 2-D [rows, cols]")]
    TapRank {
        path: PathBuf,
        name: String,
        shape: Vec<usize>,
    },
    #[error("{path}: `{name}` is not in the file")]
    Missing { path: PathBuf, name: String },
    #[error(
        "{path}: `{name}` must be an I64 (or I32) tensor of shape [n, 3], found {dtype} {shape:?}"
    )]
    BadGrid {
        path: PathBuf,
        name: String,
        dtype: String,
        shape: Vec<usize>,
    },
    #[error("unknown tolerance preset `{0}` (known: f32-vs-upstream, gpu-f32, gpu-bf16, cpu-bf16)")]
    UnknownPreset(String),
    #[error("invalid tolerance: {0}")]
    InvalidTolerance(String),
    #[error("fixture {fixture}: {detail}")]
    Fixture { fixture: String, detail: String },
}

/// Short alias used throughout the crate.
pub type Result<T, E = ConformanceError> = std::result::Result<T, E>;
