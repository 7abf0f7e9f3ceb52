//! The pure-CPU oracle of the GLM-5.3-Flash vision tower (`Glm5NextVisionModel`,
//! transformers 5.23.0), in f32 or f64, with taps at every stage (TAPS.md), and the CPU
//! embedding path ([`Embedder`]).
//!
//! - [`Tower`]: the stage-level trait every backend implements.
//! - [`CpuTower`]: this crate's backend; [`TowerWeights`] loads a checkpoint.
//! - [`TapSink`]: where taps go ([`TapMap`] in memory, [`DumpSink`] to a safetensors dump).
pub mod batcher;
pub mod config;
pub mod cpu;
pub mod embedder;
pub mod error;
pub mod geometry;
pub mod kernels;
pub mod real;
pub mod synth;
pub mod taps;
pub mod tower;
pub mod weights;

pub use batcher::{
    BatchObserver, BatchReport, Batcher, BatcherError, BatcherOptions, BatcherStats, CancelToken,
    JobError, JobOutput, JobResult, JobTimings, Ordered, OrderedItem,
};
pub use config::{ConfigError, VisionConfig};
pub use cpu::CpuTower;
pub use embedder::{EmbedOptions, Embedder, Embeddings, ItemSpan, Precision, Threads};
pub use error::{EmbedError, InputError, TowerError, WeightError};
pub use geometry::Grid;
pub use real::Real;
pub use taps::{DumpSink, Tap, TapFilter, TapMap, TapSink, WithProgress, tap_names, tap_names_for};
pub use tower::{Finished, QueuedTower, Ticket, Tower};
pub use weights::{Checkpoint, TowerWeights, tensor_specs};
