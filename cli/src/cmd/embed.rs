//! `glm5v embed`: images, video frames or a prepared pixel batch in, embeddings out.
//!
//! Image inputs (paths, directories, `@LIST`, data URIs) stream through the batcher
//! (`crate::corpus`): a Parquet dataset for `--out NAME.parquet`, one safetensors file
//! otherwise. `--pixels`, `--video` and `--taps` run one packed forward as before.

use crate::backend::BackendArgs;
use crate::corpus::{self, CorpusArgs, Outcome, RunInfo};
use crate::inputs::{Batch, InputArgs};
use crate::{CmdResult, Failure, out};
use anyhow::{Context, bail};
use glm5v_reference::{DumpSink, TapFilter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

/// Run the vision tower: images, video frames or a prepared pixel batch in, embeddings out.
///
/// Images (paths, directories searched recursively by image extension, @LIST files of paths,
/// @- for standard input, data URIs) are streamed: priced from their headers, packed into
/// forwards of at most --batch-tokens, decoded ahead while the tower runs, written as each
/// forward completes, in input order.
///
/// --out NAME.parquet writes a Parquet dataset directory (NAME.parquet/part-00000.parquet, ...;
/// columns input, status, error, grid_thw, tokens, shape, embedding), a row per input: a bad
/// input is a row with its error and the run goes on; a rerun into the same dataset skips the
/// inputs already written (same path, size and mtime; --overwrite starts afresh). Exit 0 when
/// every input was embedded, 3 when some failed, 2 on usage errors.
///
/// Any other --out is a safetensors file with `embeddings` [tokens, out_hidden_size] F32 and
/// the grids (`image_grid_thw`, and `video_grid_thw` for videos), written only when every input
/// succeeded; `--taps` also writes a tap dump (README "File formats") that `glm5v diff`
/// compares against upstream's.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Say which kernels ran (backend, precision, CPU instruction set) and how long it took.
    #[arg(short, long)]
    verbose: bool,
    #[command(flatten)]
    input: InputArgs,
    /// Output: NAME.parquet (a Parquet dataset directory) or a safetensors file.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Also write every tap (with the inputs) to this safetensors file (one packed forward).
    #[arg(long, value_name = "FILE")]
    taps: Option<PathBuf>,
    #[command(flatten)]
    corpus: CorpusArgs,
}

pub fn run(args: Args) -> CmdResult {
    let parquet = args.out.extension().is_some_and(|e| e == "parquet");
    let packed = args.input.pixels.is_some() || !args.input.video.is_empty() || args.taps.is_some();
    if parquet && packed {
        return Err(Failure::Error(anyhow::anyhow!(
            "--out {} is a Parquet dataset of image inputs: --pixels, --video and --taps write safetensors files",
            args.out.display()
        )));
    }
    if packed {
        return Ok(embed_packed(args)?);
    }
    match embed_stream(args, parquet)? {
        Outcome::AllOk => Ok(()),
        Outcome::SomeFailed => Err(Failure::Partial),
    }
}

fn embed_stream(args: Args, parquet: bool) -> anyhow::Result<Outcome> {
    let inputs = corpus::list::expand(&args.input.images)?;
    if inputs.is_empty() {
        bail!(
            "no input: give IMAGE paths, directories, @LIST files or data URIs, --video FILE..., or --pixels FILE"
        );
    }
    let b = &args.backend;
    let mut embedders = b.load_workers()?;
    let prep = args
        .input
        .tokens
        .prep_options(Some(&b.model), &args.input.alpha)?;
    for e in &mut embedders {
        e.set_prep_options(prep.clone());
    }
    if args.verbose {
        eprintln!(
            "glm5v: {} backend, {}: {}{}",
            b.backend,
            b.precision(),
            embedders[0].tower().describe(),
            match embedders.len() {
                1 => String::new(),
                k => format!(", {k} workers"),
            }
        );
    }
    let info = RunInfo {
        model: b.model.display().to_string(),
        precision: b.precision(),
        backend: b.backend.clone(),
    };
    if parquet {
        corpus::to_parquet(embedders, inputs, &args.out, &args.corpus, &info)
    } else {
        corpus::to_safetensors(embedders, inputs, &args.out, &args.corpus, &info)?;
        Ok(Outcome::AllOk)
    }
}

/// One packed forward over everything (pixels, videos, or with taps).
fn embed_packed(args: Args) -> anyhow::Result<()> {
    let b = &args.backend;
    let precision = b.precision();
    let embedder = b.load()?;
    if args.verbose {
        eprintln!(
            "glm5v: {} backend, {precision}: {}",
            b.backend,
            embedder.tower().describe()
        );
    }
    let batch: Batch = args.input.load(Some(&b.model))?;

    let mut sink = match &args.taps {
        Some(p) => {
            // DumpSink streams to `<p>.data.part` and renames into place on finish (removed on drop)
            out::check_dir(p)?;
            let mut s = DumpSink::create(p, TapFilter::all())
                .with_context(|| format!("cannot write {}", p.display()))?;
            s.set_metadata("precision", &precision);
            s.set_metadata("checkpoint", &b.model.display().to_string());
            s.set_metadata(
                "producer",
                &format!("glm5v {}", embedder.tower().describe()),
            );
            s.inputs(
                batch.pixel_values.as_slice().expect("standard layout"),
                batch.pixel_values.nrows(),
                batch.pixel_values.ncols(),
                &batch.grids,
            );
            Some(s)
        }
        None => None,
    };

    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} steps, {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("{} tokens", batch.pixel_values.nrows()));
    let start = Instant::now();
    let mut shown = false;
    let mut on_progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        // only forwards longer than a second get a bar
        if !shown && start.elapsed().as_secs_f64() > 1.0 {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            shown = true;
        }
    };
    let result = embedder.embed_pixels_with(
        batch.pixel_values.view(),
        &batch.grids,
        sink.as_mut()
            .map(|s| s as &mut dyn glm5v_reference::TapSink),
        Some(&mut on_progress),
    );
    bar.finish_and_clear();
    let emb = result.context("running the tower")?;
    if args.verbose {
        eprintln!(
            "glm5v: forward of {} tokens in {:.3} s",
            batch.pixel_values.nrows(),
            start.elapsed().as_secs_f64()
        );
    }

    let e = emb.embeddings.as_standard_layout();
    let img: Vec<i64> = batch
        .image_grids()
        .flat_map(|g| g.map(|v| v as i64))
        .collect();
    let vid: Vec<i64> = batch
        .video_grids()
        .flat_map(|g| g.map(|v| v as i64))
        .collect();
    let items: Vec<serde_json::Value> = emb
        .items
        .iter()
        .zip(&batch.names)
        .map(|(s, name)| {
            serde_json::json!({"input": name, "grid_thw": s.grid, "token_offset": s.token_offset, "tokens": s.token_count})
        })
        .collect();
    out::write_embeddings(
        &args.out,
        e.as_slice().expect("standard layout"),
        e.ncols(),
        &img,
        &vid,
        items,
        &precision,
        &b.model.display().to_string(),
    )?;
    if let (Some(s), Some(dest)) = (sink, &args.taps) {
        s.finish()
            .with_context(|| format!("cannot write {}", dest.display()))?;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "glm5v: {} input(s), {} tokens x {} -> {} ({secs:.2} s{})",
        batch.names.len(),
        e.nrows(),
        e.ncols(),
        args.out.display(),
        args.taps
            .as_ref()
            .map(|p| format!(", taps -> {}", p.display()))
            .unwrap_or_default()
    );
    Ok(())
}
