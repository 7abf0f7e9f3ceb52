//! `glm5v diff A B`: compare two tap dumps tap by tap, in forward order.

use crate::{CmdResult, Failure, out};
use anyhow::Context;
use glm5v_conformance::{Preset, TapDump, TolerancePick, compare_dumps, render};
use std::path::PathBuf;

/// Compare two tap dumps (the tap-dump layout, README "File formats") tap by tap.
///
/// A is the candidate, B the reference: relative L2 is ||a-b|| / ||b||. Taps are compared in forward
/// order; the first one over tolerance is the divergence point. NaN/Inf positions must match before
/// numbers count. Names only one side has are listed. Exits 1 when any tap fails.
#[derive(clap::Args)]
pub struct Args {
    /// Candidate dump (e.g. ours: `glm5v embed --taps`).
    a: PathBuf,
    /// Reference dump (e.g. upstream's, from fixtures/upstream/dump_taps.py).
    b: PathBuf,
    /// Tolerance preset: f32-vs-upstream (default; max(1e-5, 3 x B's self_disagreement)),
    /// gpu-f32 (1e-4), gpu-bf16 (2e-2 and cosine >= 0.999), cpu-bf16 (1.6e-2 and cosine >= 0.999).
    #[arg(long, value_name = "PRESET", conflicts_with = "rtol")]
    tolerance: Option<String>,
    /// A relative L2 bound given by hand instead of a preset.
    #[arg(long, value_name = "X")]
    rtol: Option<f64>,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw relative error against depth (one line per tap kind) to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    let pick = match (&args.tolerance, args.rtol) {
        (Some(p), _) => TolerancePick::Preset(Preset::parse(p)?),
        (None, Some(x)) => TolerancePick::Rtol(x),
        (None, None) => TolerancePick::default(),
    };
    let a = TapDump::open(&args.a)?;
    let b = TapDump::open(&args.b)?;
    let report = compare_dumps(&a, &b, pick)?;
    if args.json {
        println!("{}", render::json(&report));
    } else {
        print!("{}", render::table(&report));
    }
    if let Some(plot) = &args.plot {
        out::write_bytes(plot, render::svg(&report).as_bytes()).context("writing the plot")?;
        if !args.json {
            println!("plot: {}", plot.display());
        }
    }
    if report.passed {
        Ok(())
    } else {
        Err(Failure::Verdict)
    }
}
