//! Conformance of GLM-5.3-Flash vision tower implementations: the one comparison engine.
//!
//! - [`dump`]: reading tap dumps (the tap-dump layout: README, "File formats").
//! - [`metrics`]: per-tap max |diff|, relative L2 (f64), cosine, worst element, NaN/Inf agreement.
//! - [`tolerance`]: every tolerance preset of the project, each with its reason.
//! - [`order`]: forward order of taps, so the first failing tap is the divergence point.
//! - [`report`]: two dumps in, one [`Report`] out; [`render`]: table, JSON, SVG plot.
//! - [`bisect`]: two backends on one batch, each stage's own error next to the error it inherited.
//! - [`suite`], [`prep_suite`]: the committed fixtures, run (`glm5v conformance`).
//!
//! ```no_run
//! use glm5v_conformance::{TapDump, TolerancePick, compare_dumps, render};
//! let ours = TapDump::open("ours.safetensors".as_ref())?;
//! let upstream = TapDump::open("upstream.safetensors".as_ref())?;
//! let report = compare_dumps(&ours, &upstream, TolerancePick::default())?;
//! print!("{}", render::table(&report));
//! # Ok::<(), glm5v_conformance::ConformanceError>(())
//! ```
pub mod bisect;
pub mod dump;
pub mod error;
pub mod metrics;
pub mod order;
pub mod prep_suite;
pub mod render;
pub mod report;
pub mod suite;
pub mod tolerance;

pub use dump::{Layout, RowLocation, TapDump};
pub use error::{ConformanceError, Result};
pub use metrics::{Stats, compare};
pub use report::{Report, TapReport, TolerancePick, Verdict, compare_dumps, compare_dumps_with};
pub use tolerance::{Preset, Tolerance};
