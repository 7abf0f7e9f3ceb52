//! `glm5v embed` over many inputs: streamed through the library's batcher (inputs priced from
//! their headers, decoded ahead on a pool while the tower runs, forwards of at most
//! `--batch-tokens`), results written as each forward completes, in input order. Memory is
//! bounded by the batch size, not by the number of inputs.
//!
//! Outputs: a Parquet dataset (`--out NAME.parquet`: a row per input with its status and
//! error, shards renamed into place when whole, a rerun resumes) or, for small jobs, one
//! safetensors file written only when every input succeeded.

pub mod dataset;
pub mod list;
mod writer;

use anyhow::{Result, bail};
use dataset::{Dataset, Dtype, Row, stamp_of};
use glm5v_prep::ImageSource;
use glm5v_reference::{
    BatchObserver, BatchReport, Batcher, BatcherOptions, Embedder, Ordered, OrderedItem,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How a corpus run ended.
pub enum Outcome {
    /// Every input embedded.
    AllOk,
    /// Some inputs failed; their rows say why (exit 3).
    SomeFailed,
}

/// The corpus flags of `glm5v embed`.
#[derive(clap::Args, Clone, Debug)]
pub struct CorpusArgs {
    /// Most merged tokens per forward (bounds memory: about 2 GB peak RSS on the CPU with a
    /// full-size checkpoint at the default).
    #[arg(long, default_value_t = 2048, value_name = "N")]
    pub batch_tokens: usize,
    /// Rows per Parquet shard (part-00000.parquet, ...).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub shard_rows: usize,
    /// Element type of the Parquet `embedding` column: little-endian row-major f32 or bf16.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    pub out_dtype: String,
    /// With a Parquet dataset that exists: start afresh instead of resuming.
    #[arg(long)]
    pub overwrite: bool,
    /// No progress bar (it is shown only on a terminal anyway); the summary line stays.
    #[arg(long, short)]
    pub quiet: bool,
    /// Threads decoding images, apart from the tower's (default 2; with --backend gpu the
    /// cores less one, 2 to 16).
    #[arg(long, value_name = "N")]
    pub decode_threads: Option<usize>,
}

/// Metadata of the run, for the outputs.
pub struct RunInfo {
    pub model: String,
    pub precision: String,
    pub backend: String,
}

fn progress(total: usize, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden());
    if !quiet && std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{bar:30}] {pos}/{len} inputs, {msg}, {elapsed} (ETA {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

struct Tally {
    ok: usize,
    failed: usize,
    tokens: usize,
    start: Instant,
}

impl Tally {
    fn message(&self) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        format!(
            "{:.0} tokens/s, {} error{}",
            self.tokens as f64 / secs,
            self.failed,
            if self.failed == 1 { "" } else { "s" }
        )
    }
}

/// The corpus stream: results in input order, at most `forwards` forwards' worth of inputs
/// between the oldest not yet written and the newest submitted.
fn stream<'b>(
    batcher: &'b Batcher,
    inputs: &'b [String],
    batch_tokens: usize,
    forwards: usize,
) -> Ordered<'b, impl Iterator<Item = ImageSource> + 'b> {
    Ordered::new(
        batcher,
        inputs.iter().map(|a| ImageSource::from_arg(a)),
        batch_tokens.saturating_mul(forwards),
        4096,
    )
}

/// Forwards' worth of inputs a corpus run holds: those a worker keeps queued on its device
/// (two on a GPU: one running, one behind it; one, the forward itself, on the CPU) and the next
/// one decoding.
fn window_forwards(embedders: &[Embedder]) -> usize {
    let queued = embedders
        .iter()
        .map(|e| e.tower().queue_depth())
        .max()
        .unwrap_or(1);
    queued + 1
}

/// The device time of every forward so far, summed over the workers (nanoseconds): GPU towers
/// report it, CPU towers do not (it stays 0).
type DeviceTime = Arc<AtomicU64>;

fn batcher(
    embedders: Vec<Embedder>,
    args: &CorpusArgs,
    backend: &str,
    device: DeviceTime,
) -> Result<Batcher> {
    if args.batch_tokens == 0 {
        bail!("--batch-tokens must be at least 1");
    }
    let decode_threads = args
        .decode_threads
        .unwrap_or_else(|| crate::backend::default_decode_threads(backend));
    if decode_threads == 0 {
        bail!("--decode-threads must be at least 1");
    }
    let mut o = BatcherOptions::new(args.batch_tokens, decode_threads);
    // an image priced over --batch-tokens runs in a forward of its own
    o.solo_over_budget = true;
    let observer: BatchObserver = Arc::new(move |b: &BatchReport| {
        if let Some(d) = b.device {
            device.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        }
    });
    Ok(Batcher::with_observer(
        embedders.into_iter().map(Arc::new).collect(),
        o,
        Some(observer),
    )?)
}

/// `, GPU busy 93% of the time` when the towers reported device time (`device_ns` summed over
/// `workers` devices), else nothing.
fn busy_share(device_ns: u64, secs: f64, workers: usize) -> String {
    if device_ns == 0 || secs <= 0.0 {
        return String::new();
    }
    let share = device_ns as f64 / 1e9 / (secs * workers.max(1) as f64);
    let what = if workers > 1 { "GPUs" } else { "GPU" };
    format!(", {what} busy {:.0}% of the time", 100.0 * share)
}

fn describe_error(item: &OrderedItem) -> Option<String> {
    item.result.as_ref().err().map(|e| e.to_string())
}

/// Embeds `inputs` into the Parquet dataset `out`: a row per input, bad inputs as error rows.
/// `embedders` (one per device, at least one) share the batcher: each takes the next batch
/// when it is idle.
pub fn to_parquet(
    embedders: Vec<Embedder>,
    inputs: Vec<String>,
    out: &Path,
    args: &CorpusArgs,
    info: &RunInfo,
) -> Result<Outcome> {
    let dtype = if args.out_dtype == "bf16" {
        Dtype::Bf16
    } else {
        Dtype::F32
    };
    let hidden = embedders[0].config().out_hidden_size;
    let workers = embedders.len();
    let metadata = vec![
        ("glm5v.model".to_string(), info.model.clone()),
        ("glm5v.precision".to_string(), info.precision.clone()),
        ("glm5v.backend".to_string(), info.backend.clone()),
        ("glm5v.dtype".to_string(), args.out_dtype.clone()),
        (
            "glm5v.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ];
    let (mut ds, done) = Dataset::open(out, &metadata, args.shard_rows, args.overwrite, dtype)?;
    let given = inputs.len();
    let mut todo = Vec::with_capacity(inputs.len());
    let mut stamps = Vec::with_capacity(inputs.len());
    for a in inputs {
        let (size, mtime) = stamp_of(&a);
        if !done.contains(&(a.clone(), size, mtime)) {
            stamps.push((size, mtime));
            todo.push(a);
        }
    }
    let skipped = given - todo.len();
    let device = DeviceTime::default();
    let forwards = window_forwards(&embedders);
    let batcher = batcher(embedders, args, &info.backend, device.clone())?;
    let bar = progress(todo.len(), args.quiet);
    let mut t = Tally {
        ok: 0,
        failed: 0,
        tokens: 0,
        start: Instant::now(),
    };
    for item in stream(&batcher, &todo, args.batch_tokens, forwards) {
        let input = todo[item.index].clone();
        let error = describe_error(&item);
        let plan_grid = item.plan.as_ref().map(|p| p.grid_thw);
        let row = match item.result {
            Ok(o) => {
                t.ok += 1;
                t.tokens += o.tokens();
                Row {
                    input,
                    error: None,
                    grid_thw: Some(o.grid),
                    tokens: Some(o.tokens()),
                    shape: Some([o.tokens(), hidden]),
                    // the batch's rows as they are: the encoder copies them once
                    embedding: Some(o.embeddings),
                    stamp: stamps[item.index],
                }
            }
            Err(_) => {
                t.failed += 1;
                let tokens = item.plan.as_ref().map(|p| p.tokens);
                Row {
                    input,
                    error,
                    grid_thw: plan_grid,
                    tokens,
                    shape: tokens.map(|n| [n, hidden]),
                    embedding: None,
                    stamp: stamps[item.index],
                }
            }
        };
        ds.push(row)?;
        bar.inc(1);
        bar.set_message(t.message());
    }
    bar.finish_and_clear();
    let closing = Instant::now();
    let shards = ds.finish()?;
    let closing = closing.elapsed().as_secs_f64();
    let secs = t.start.elapsed().as_secs_f64();
    eprintln!(
        "glm5v: {given} input(s): {} embedded, {} failed, {skipped} already done; {} tokens in {secs:.2} s ({:.0} tokens/s{}{}) -> {} ({shards} new shard{})",
        t.ok,
        t.failed,
        t.tokens,
        t.tokens as f64 / secs.max(1e-9),
        busy_share(device.load(Ordering::Relaxed), secs, workers),
        if closing >= 0.05 {
            format!(", the last writes {closing:.2} s")
        } else {
            String::new()
        },
        out.display(),
        if shards == 1 { "" } else { "s" }
    );
    Ok(if t.failed == 0 {
        Outcome::AllOk
    } else {
        Outcome::SomeFailed
    })
}

/// Embeds `inputs` into one safetensors file, all or nothing: the first bad input ends the
/// run with its error and no file.
pub fn to_safetensors(
    embedders: Vec<Embedder>,
    inputs: Vec<String>,
    out: &Path,
    args: &CorpusArgs,
    info: &RunInfo,
) -> Result<()> {
    crate::out::check_dir(out)?;
    let hidden = embedders[0].config().out_hidden_size;
    let forwards = window_forwards(&embedders);
    let batcher = batcher(embedders, args, &info.backend, DeviceTime::default())?;
    let bar = progress(inputs.len(), args.quiet);
    let start = Instant::now();
    let mut values: Vec<f32> = Vec::new();
    let mut grids: Vec<i64> = Vec::new();
    let mut items = Vec::new();
    let mut offset = 0;
    for item in stream(&batcher, &inputs, args.batch_tokens, forwards) {
        let name = crate::inputs::short_arg(&inputs[item.index]);
        // the decoders' errors name their input; the others do not
        let o = item.result.map_err(|e| match e {
            glm5v_reference::JobError::Input(_)
            | glm5v_reference::JobError::DecoderPanic { .. } => anyhow::Error::new(e),
            other => anyhow::Error::new(other).context(format!("input {name}")),
        })?;
        let rows = o.embeddings.as_standard_layout();
        values.extend_from_slice(rows.as_slice().expect("standard layout"));
        grids.extend(o.grid.map(|v| v as i64));
        items.push(serde_json::json!({"input": name, "grid_thw": o.grid, "token_offset": offset, "tokens": o.tokens()}));
        offset += o.tokens();
        bar.inc(1);
    }
    bar.finish_and_clear();
    crate::out::write_embeddings(
        out,
        &values,
        hidden,
        &grids,
        &[],
        items,
        &info.precision,
        &info.model,
    )?;
    eprintln!(
        "glm5v: {} input(s), {offset} tokens x {hidden} -> {} ({:.2} s)",
        inputs.len(),
        out.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
