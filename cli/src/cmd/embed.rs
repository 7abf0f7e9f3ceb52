//! `glm5v embed`: images, video frames or a prepared pixel batch in, embeddings out.

use crate::inputs::{Batch, InputArgs};
use crate::{CmdResult, out};
use anyhow::{Context, bail};
use glm5v_reference::{DumpSink, EmbedOptions, Embedder, Precision, TapFilter, Threads};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// Run the vision tower: images, video frames or a prepared pixel batch in, embeddings out.
///
/// Writes `embeddings` [tokens, out_hidden_size] F32 and the grids (`image_grid_thw`, and
/// `video_grid_thw` for videos) to a safetensors file; `--taps` also writes a tap dump
/// (the tap-dump layout, README "File formats") that `glm5v diff` compares against upstream's.
#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint directory (config.json + model.safetensors or an index with shards).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// Where the tower runs: cpu (the reference) or gpu (CUDA device 0).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    backend: String,
    /// Arithmetic: f32 (upstream's path; on the GPU its parity mode), f64 (the CPU oracle only),
    /// bf16 (bf16 weights and product inputs, f32 accumulation: fastest on both backends).
    /// Default: f32 on the CPU, bf16 on the GPU.
    #[arg(long, value_parser = ["f32", "f64", "bf16"])]
    precision: Option<String>,
    /// Say which kernels ran (backend, precision, CPU instruction set) and how long it took.
    #[arg(short, long)]
    verbose: bool,
    /// Worker threads (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    #[command(flatten)]
    input: InputArgs,
    /// Output safetensors file for the embeddings.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Also write every tap (with the inputs) to this safetensors file.
    #[arg(long, value_name = "FILE")]
    taps: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    Ok(embed(args)?)
}

fn embed(mut args: Args) -> anyhow::Result<()> {
    let precision = args
        .precision
        .take()
        .unwrap_or_else(|| if args.backend == "gpu" { "bf16" } else { "f32" }.to_string());
    let threads = match args.threads {
        None => Threads::Global,
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => Threads::Count(n),
    };
    let embedder = if args.backend == "gpu" {
        let precision = match precision.as_str() {
            "bf16" => glm5v_gpu::Precision::Bf16,
            "f32" => glm5v_gpu::Precision::F32,
            _ => bail!(
                "--precision f64 runs only on the CPU backend; the GPU computes in bf16 or f32"
            ),
        };
        let tower = glm5v_gpu::GpuTower::load(&args.model, glm5v_gpu::GpuOptions { precision })
            .with_context(|| format!("--backend gpu: loading {}", args.model.display()))?;
        Embedder::from_tower(Box::new(tower), threads)?
    } else {
        let precision = Precision::parse(&precision)
            .with_context(|| format!("--precision {precision}: not f32, f64 or bf16"))?;
        Embedder::load(&args.model, EmbedOptions { precision, threads })
            .with_context(|| format!("loading {}", args.model.display()))?
    };
    for w in embedder.warnings() {
        eprintln!("glm5v: warning: {w}");
    }
    if args.verbose {
        eprintln!(
            "glm5v: {} backend, {precision}: {}",
            args.backend,
            embedder.tower().describe()
        );
    }
    let batch: Batch = args.input.load(Some(&args.model))?;

    let mut sink = match &args.taps {
        Some(p) => {
            // DumpSink streams to `<p>.data.part` and renames into place on finish (removed on drop)
            out::check_dir(p)?;
            let mut s = DumpSink::create(p, TapFilter::all())
                .with_context(|| format!("cannot write {}", p.display()))?;
            s.set_metadata("precision", &precision);
            s.set_metadata("checkpoint", &args.model.display().to_string());
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

    // embeddings + grids, all at once
    let e = emb.embeddings.as_standard_layout();
    let e_bytes: &[u8] = bytemuck::cast_slice(e.as_slice().expect("standard layout"));
    let img: Vec<i64> = batch
        .image_grids()
        .flat_map(|g| g.map(|v| v as i64))
        .collect();
    let vid: Vec<i64> = batch
        .video_grids()
        .flat_map(|g| g.map(|v| v as i64))
        .collect();
    let img_bytes: Vec<u8> = img.iter().flat_map(|v| v.to_le_bytes()).collect();
    let vid_bytes: Vec<u8> = vid.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut views = vec![(
        "embeddings".to_string(),
        TensorView::new(Dtype::F32, vec![e.nrows(), e.ncols()], e_bytes)?,
    )];
    if batch.images > 0 || batch.videos == 0 {
        views.push((
            "image_grid_thw".into(),
            TensorView::new(Dtype::I64, vec![img.len() / 3, 3], &img_bytes)?,
        ));
    }
    if batch.videos > 0 {
        views.push((
            "video_grid_thw".into(),
            TensorView::new(Dtype::I64, vec![vid.len() / 3, 3], &vid_bytes)?,
        ));
    }
    let items: Vec<serde_json::Value> = emb
        .items
        .iter()
        .zip(&batch.names)
        .map(|(s, name)| {
            serde_json::json!({"input": name, "grid_thw": s.grid, "token_offset": s.token_offset, "tokens": s.token_count})
        })
        .collect();
    let mut meta = HashMap::new();
    meta.insert("producer".to_string(), "glm5v".to_string());
    meta.insert("version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    meta.insert("precision".to_string(), precision.clone());
    meta.insert("checkpoint".to_string(), args.model.display().to_string());
    meta.insert(
        "items".to_string(),
        serde_json::Value::Array(items).to_string(),
    );
    let bytes = safetensors::serialize(views, Some(meta))?;
    out::write_bytes(&args.out, &bytes)?;
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
