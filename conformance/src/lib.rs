//! Conformance of GLM-5.3-Flash vision tower implementations: the one comparison engine.
//!
//! - [`dump`]: reading tap dumps (the tap-dump layout: docs/CONFORMANCE.md, "File formats").
//! - [`metrics`]: per-tap max |diff|, relative L2 (f64), cosine, worst element, NaN/Inf agreement.
//! - [`tolerance`]: every tolerance preset of the project, each with its reason.
//! - [`order`]: forward order of taps, so the first failing tap is the divergence point.
//! - [`report`]: two dumps in, one [`Report`] out; [`render`]: table, JSON, SVG plot.
//! - [`bisect`]: two backends on one batch, each stage's own error next to the error it inherited.
//! - [`suite`], [`prep_suite`]: the committed fixtures, run (`glm5v conformance`).
//!
//! Our CPU forward of the tiny fixture checkpoint against upstream's taps of the same image
//! (what `glm5v embed --taps` followed by `glm5v diff` does):
//!
//! ```
//! use glm5v_conformance::{TapDump, TolerancePick, compare_dumps, render};
//! use glm5v_prep::ImageSource;
//! use glm5v_reference::{DumpSink, EmbedOptions, Embedder, TapFilter};
//!
//! let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/tower");
//! let embedder = Embedder::load(format!("{fixtures}/tiny").as_ref(), EmbedOptions::default())?;
//! let image = ImageSource::from_arg(&format!("{fixtures}/inputs/scene_112x140.png"));
//!
//! // every tap of our forward, to a dump file
//! let dir = tempfile::tempdir()?;
//! let ours = dir.path().join("ours.safetensors");
//! let mut sink = DumpSink::create(&ours, TapFilter::all())?;
//! embedder.embed_images_with(&[image], Some(&mut sink), None)?;
//! sink.finish()?;
//!
//! // A is the candidate, B the reference; the default preset is f32-vs-upstream
//! let upstream = TapDump::open(format!("{fixtures}/tiny/taps.safetensors").as_ref())?;
//! let report = compare_dumps(&TapDump::open(&ours)?, &upstream, TolerancePick::default())?;
//! assert!(report.passed && report.first_divergence.is_none());
//! assert_eq!(report.taps.len(), 3 + 2 * 9 + 2 + 7); // every tap of the 2-block tower
//! print!("{}", render::table(&report));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
pub mod bisect;
pub mod corpus;
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
