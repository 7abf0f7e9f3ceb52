//! The crate's error types: one per concern, each message naming what a user can fix.

use crate::config::ConfigError;

/// A checkpoint that cannot be used (TAPS.md section 1).
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{dir}: neither model.safetensors nor model.safetensors.index.json is there")]
    NoWeights { dir: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid safetensors file: {reason}")]
    Header { path: String, reason: String },
    #[error("{path}: not a valid safetensors index: {reason}")]
    Index { path: String, reason: String },
    #[error("shard {shard} named by {index} is missing")]
    MissingShard { index: String, shard: String },
    #[error(
        "text-only checkpoint, no vision tower: {dir} has no tensor `model.visual.patch_embed.proj.weight`"
    )]
    TextOnly { dir: String },
    #[error("missing tensor `{name}` (expected shape {expected:?})")]
    Missing { name: String, expected: Vec<usize> },
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor `{name}` has dtype {found}, expected BF16, F16 or F32")]
    Dtype { name: String, found: String },
}

/// Inputs that do not fit the tower's contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("pixel_values has {found} columns, the checkpoint's patches have {expected} values")]
    PatchDim { found: usize, expected: usize },
    #[error("pixel_values has {found} rows, image_grid_thw describes {expected} (sum of t*h*w)")]
    Rows { found: usize, expected: usize },
    #[error("image_grid_thw row {index} is [{t}, {h}, {w}]: every value must be positive")]
    EmptyGrid {
        index: usize,
        t: usize,
        h: usize,
        w: usize,
    },
    #[error(
        "image_grid_thw row {index} is [{t}, {h}, {w}]: h and w must be multiples of the merge size {merge}"
    )]
    Merge {
        index: usize,
        t: usize,
        h: usize,
        w: usize,
        merge: usize,
    },
    #[error("the batch is empty (no rows in image_grid_thw)")]
    Empty,
    #[error("{what}: expected shape {expected:?}, found {found:?}")]
    Shape {
        what: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("cu_seqlens {found:?} must start at 0, never decrease and end at {tokens}")]
    Segments { found: Vec<usize>, tokens: usize },
    #[error("image_grid_thw row {index} [{t}, {h}, {w}]: the patch count t*h*w overflows")]
    GridOverflow {
        index: usize,
        t: usize,
        h: usize,
        w: usize,
    },
    #[error("block index {index} is out of range (depth {depth})")]
    Block { index: usize, depth: usize },
}

/// What a [`crate::Tower`] stage can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TowerError {
    #[error(transparent)]
    Input(#[from] InputError),
    /// A backend-specific failure (device, driver, out of memory), described by the backend.
    #[error("{backend}: {message}")]
    Backend { backend: String, message: String },
}

/// What [`crate::Embedder`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(transparent)]
    Weights(#[from] WeightError),
    #[error(transparent)]
    Tower(#[from] TowerError),
    #[error(transparent)]
    Prep(#[from] glm5v_prep::PrepError),
    #[error("cannot build a pool of {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
}
