//! The pure-CPU oracle of the GLM-5.3-Flash vision tower.
pub mod config;
pub mod synth;
pub use config::{ConfigError, VisionConfig};
