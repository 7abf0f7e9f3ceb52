pub mod bench;
pub mod bisect;
pub mod conformance;
pub mod diff;
pub mod embed;
pub mod plan;
pub mod prep;
pub mod synth;
