//! The batcher: inputs from many callers, priced from their headers, decoded on a pool of their
//! own while the tower runs, and packed into forwards of at most a token budget.
//!
//! One design serves both the encoder service (`glm5v serve`: requests arrive from many clients,
//! each answered as soon as its rows are back) and the corpus pipeline (`glm5v embed` over a
//! dataset, Python's `Embedder.embed_many`: one stream of inputs, results in input order with
//! [`Ordered`]).
//!
//! The stages, each bounded so that memory stays flat whatever the load:
//! 1. [`Batcher::submit`]: an input whose header price ([`Batcher::plan`]) is over the forward's
//!    budget is refused at once (it could never run); the rest join the pending queue. The
//!    callers bound that queue (the service with its concurrency limit, [`Ordered`] with its
//!    window).
//! 2. Decode threads take pending inputs in order, drop the cancelled ones (a client that left)
//!    before decoding, decode and preprocess each (upstream's processor, `glm5v_prep`) into its
//!    `pixel_values`, and wait while the decoded-but-not-run inputs hold `max_ready_tokens`.
//! 3. A worker per tower (one per GPU, or the CPU) waits until something is decoded, then takes
//!    what is ready, oldest first, up to `max_batch_tokens` (no wait window: a free tower never
//!    waits for a fuller batch), drops the cancelled ones again, runs one packed forward and
//!    hands each input its own rows.
//!
//! Batch invariance: an input's rows are the same bits whether it ran alone or packed with any
//! others, on the CPU (every product is row-wise, attention is per image, nothing reduces over
//! the packed sequence); `tests/batcher.rs` checks random packings against each input alone.

mod ordered;
mod queued;

pub use ordered::{Ordered, OrderedItem};

use crate::embedder::Embedder;
use crate::geometry::Grid;
use glm5v_prep::{ImageSource, Plan, PrepError, PrepOptions};
use ndarray::{ArcArray2, ArrayView2, s};
use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the batcher packs and how much it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatcherOptions {
    /// Most merged tokens (output rows) in one forward. An input priced over it is refused,
    /// unless `solo_over_budget`.
    pub max_batch_tokens: usize,
    /// Run an input priced over `max_batch_tokens` in a forward of its own instead of refusing
    /// it (a corpus run: its memory is then bounded by the processor's largest image).
    pub solo_over_budget: bool,
    /// Threads that decode and preprocess inputs, apart from the forward's threads.
    pub decode_threads: usize,
    /// Most merged tokens decoded and waiting for a forward (their `pixel_values` are the
    /// batcher's memory: about 18.8 KB a token at the default patch size). At least
    /// `max_batch_tokens`; twice it lets the next forward's inputs decode while one runs.
    pub max_ready_tokens: usize,
}

impl BatcherOptions {
    /// `max_batch_tokens` per forward, two forwards' worth decoded ahead, `decode_threads`
    /// decoders.
    pub fn new(max_batch_tokens: usize, decode_threads: usize) -> Self {
        Self {
            max_batch_tokens,
            solo_over_budget: false,
            decode_threads,
            max_ready_tokens: max_batch_tokens.saturating_mul(2),
        }
    }
}

/// Set by a caller that no longer wants an input (its client disconnected, its deadline
/// passed); the batcher then drops it before decoding it or before its forward.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Where one input's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobTimings {
    /// Submitted until a decoder took it.
    pub queue: Duration,
    /// Decoding and preprocessing.
    pub decode: Duration,
    /// Decoded until its batch started.
    pub wait: Duration,
    /// Copying its batch's pixels into one buffer (shared with the inputs packed with it).
    pub gather: Duration,
    /// Its forward (shared with the inputs packed with it).
    pub forward: Duration,
}

/// One input's embeddings.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// `[tokens, out_hidden_size]`, row-major: its rows of the batch's output, shared with
    /// the inputs packed with it (no copy; `.into_owned()` copies them out).
    pub embeddings: ArcArray2<f32>,
    /// `[t, h, w]` in patches.
    pub grid: Grid,
    pub timings: JobTimings,
    /// Merged tokens and inputs of the forward it ran in, and which worker ran it.
    pub batch_tokens: usize,
    pub batch_items: usize,
    pub worker: usize,
}

impl JobOutput {
    /// Merged tokens (output rows).
    pub fn tokens(&self) -> usize {
        self.embeddings.nrows()
    }
}

/// Why an input has no embeddings.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Its header or its pixels could not be read (the decoder's typed error).
    #[error("{0}")]
    Input(#[from] PrepError),
    /// Its price is over the forward's budget: it could never run (without
    /// `solo_over_budget`).
    #[error(
        "{tokens} tokens exceed the batch budget of {max_batch_tokens} tokens (max-batch-tokens)"
    )]
    TooLarge {
        tokens: usize,
        max_batch_tokens: usize,
    },
    /// The decoder panicked on it (a bug of ours or of a decoder library; the batcher goes on).
    #[error("{input}: the decoder failed unexpectedly (a bug: please report this input)")]
    DecoderPanic { input: String },
    /// Its caller cancelled it before it ran.
    #[error("cancelled before it ran")]
    Cancelled,
    /// The tower failed on a batch it was in (the batcher is then [`Batcher::is_broken`]).
    #[error("the tower failed: {0}")]
    Backend(String),
    /// Submitted after [`Batcher::shutdown`] began.
    #[error("the batcher is shutting down")]
    ShutDown,
}

pub type JobResult = Result<JobOutput, JobError>;

/// What a forward did, for metrics.
#[derive(Debug, Clone, Copy)]
pub struct BatchReport {
    pub worker: usize,
    pub items: usize,
    pub tokens: usize,
    /// Copying the inputs' pixels into one buffer for the forward.
    pub gather: Duration,
    /// The tower's forward (on a device: from queueing it to its rows on the host).
    pub forward: Duration,
    /// The device's own time for the forward (a GPU tower's CUDA events), `None` for a tower
    /// that runs on the host's threads. Summed over a run and divided by the wall time: how
    /// busy the device was.
    pub device: Option<Duration>,
}

/// Called after every forward, from the worker's thread.
pub type BatchObserver = Arc<dyn Fn(&BatchReport) + Send + Sync>;

/// Counts and levels of the batcher now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatcherStats {
    /// Submitted, not yet taken by a decoder.
    pub pending: usize,
    /// Being decoded now.
    pub decoding: usize,
    /// Decoded, waiting for a forward: inputs and their merged tokens.
    pub ready: usize,
    pub ready_tokens: usize,
    /// In a forward now.
    pub running: usize,
    /// Inputs dropped because they were cancelled (before decoding or before their forward).
    pub dropped: u64,
    /// Forwards run.
    pub batches: u64,
}

type Done = Box<dyn FnOnce(JobResult) + Send>;

struct Pending {
    seq: u64,
    source: ImageSource,
    tokens: usize,
    cancel: CancelToken,
    done: Done,
    submitted: Instant,
}

struct Decoded {
    pixels: Vec<f32>,
    grid: Grid,
    tokens: usize,
    cancel: CancelToken,
    done: Done,
    timings: JobTimings,
    decoded: Instant,
}

#[derive(Default)]
struct State {
    pending: VecDeque<Pending>,
    decoding: usize,
    /// Decoded inputs by submission order: a forward takes the oldest first.
    ready: BTreeMap<u64, Decoded>,
    ready_tokens: usize,
    running: usize,
    closing: bool,
    next_seq: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Decoders wait here for pending inputs or for room in the ready set.
    decode_cv: Condvar,
    /// Workers wait here for decoded inputs (and, when closing, for the decoders' end).
    ready_cv: Condvar,
    options: BatcherOptions,
    prep: PrepOptions,
    patch_dim: usize,
    merge_unit: usize,
    dropped: AtomicU64,
    batches: AtomicU64,
    broken: AtomicBool,
    on_batch: Option<BatchObserver>,
}

/// Packs inputs into forwards over one or more towers ([`Embedder`]s: the CPU, or one per GPU).
pub struct Batcher {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Batcher {
    /// Starts the decoders and one worker per embedder. Every embedder must hold the same
    /// checkpoint (the first one's image processor options are used for all).
    pub fn new(workers: Vec<Arc<Embedder>>, options: BatcherOptions) -> Result<Self, BatcherError> {
        Self::with_observer(workers, options, None)
    }

    /// As [`new`](Self::new), calling `on_batch` after every forward (from the worker's thread).
    pub fn with_observer(
        workers: Vec<Arc<Embedder>>,
        options: BatcherOptions,
        on_batch: Option<BatchObserver>,
    ) -> Result<Self, BatcherError> {
        let first = workers.first().ok_or(BatcherError::NoWorkers)?;
        if options.max_batch_tokens == 0 {
            return Err(BatcherError::Option(
                "max_batch_tokens must be at least 1".into(),
            ));
        }
        if options.decode_threads == 0 {
            return Err(BatcherError::Option(
                "decode_threads must be at least 1".into(),
            ));
        }
        if options.max_ready_tokens < options.max_batch_tokens {
            return Err(BatcherError::Option(format!(
                "max_ready_tokens ({}) must be at least max_batch_tokens ({})",
                options.max_ready_tokens, options.max_batch_tokens
            )));
        }
        let cfg = first.config();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            decode_cv: Condvar::new(),
            ready_cv: Condvar::new(),
            options,
            prep: first.prep_options().clone(),
            patch_dim: cfg.patch_dim(),
            merge_unit: cfg.merge_unit(),
            dropped: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            on_batch,
        });
        let mut threads = Vec::new();
        // The decoders' own rayon pool: prep's parallel loops then never queue behind the
        // forward's work in the global pool. The loops themselves run on plain threads and enter
        // the pool for each decode only: a loop run inside the pool (`pool.install(decode_loop)`)
        // let a pool thread waiting in a decode's join steal a not-yet-started loop, which never
        // returns, and the decode never finished (seen on 2 cores: a corpus run hung for good).
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(options.decode_threads)
                .thread_name(|i| format!("glm5v-decode-{i}"))
                .build()
                .map_err(|e| BatcherError::Option(format!("decode threads: {e}")))?,
        );
        for i in 0..options.decode_threads {
            let shared = shared.clone();
            let pool = pool.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("glm5v-decoder-{i}"))
                    .spawn(move || decode_loop(&shared, &pool))
                    .map_err(|e| BatcherError::Option(format!("decode thread: {e}")))?,
            );
        }
        for (i, embedder) in workers.into_iter().enumerate() {
            let shared = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("glm5v-worker-{i}"))
                    .spawn(move || worker_loop(&shared, &embedder, i))
                    .map_err(|e| BatcherError::Option(format!("worker thread: {e}")))?,
            );
        }
        Ok(Self {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// The options it packs by.
    pub fn options(&self) -> BatcherOptions {
        self.shared.options
    }

    /// The image processor's options every input is decoded with.
    pub fn prep_options(&self) -> &PrepOptions {
        &self.shared.prep
    }

    /// What `source` will cost, from its header alone (no pixels decoded).
    pub fn plan(&self, source: &ImageSource) -> Result<Plan, PrepError> {
        glm5v_prep::plan_image(source, &self.shared.prep)
    }

    /// Queues `source`, priced at `tokens` merged tokens (its [`plan`](Self::plan)); `done`
    /// gets its result, exactly once, from one of the batcher's threads (or from this call,
    /// for an input refused at once).
    pub fn submit(
        &self,
        source: ImageSource,
        tokens: usize,
        cancel: CancelToken,
        done: impl FnOnce(JobResult) + Send + 'static,
    ) {
        let max = self.shared.options.max_batch_tokens;
        if tokens > max && !self.shared.options.solo_over_budget {
            return done(Err(JobError::TooLarge {
                tokens,
                max_batch_tokens: max,
            }));
        }
        let mut st = self.shared.state.lock().expect("batcher state");
        if st.closing {
            drop(st);
            return done(Err(JobError::ShutDown));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.pending.push_back(Pending {
            seq,
            source,
            tokens,
            cancel,
            done: Box::new(done),
            submitted: Instant::now(),
        });
        drop(st);
        self.shared.decode_cv.notify_one();
    }

    /// Counts and levels now.
    pub fn stats(&self) -> BatcherStats {
        let st = self.shared.state.lock().expect("batcher state");
        BatcherStats {
            pending: st.pending.len(),
            decoding: st.decoding,
            ready: st.ready.len(),
            ready_tokens: st.ready_tokens,
            running: st.running,
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            batches: self.shared.batches.load(Ordering::Relaxed),
        }
    }

    /// Inputs inside the batcher (pending, decoding, ready or running).
    pub fn in_flight(&self) -> usize {
        let s = self.stats();
        s.pending + s.decoding + s.ready + s.running
    }

    /// Whether a forward failed (a tower error or panic that was not an input's fault).
    pub fn is_broken(&self) -> bool {
        self.shared.broken.load(Ordering::Relaxed)
    }

    /// Refuses new inputs ([`JobError::ShutDown`]), finishes every input already submitted,
    /// then stops the threads. Idempotent.
    pub fn shutdown(&self) {
        {
            let mut st = self.shared.state.lock().expect("batcher state");
            st.closing = true;
        }
        self.shared.decode_cv.notify_all();
        self.shared.ready_cv.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().expect("batcher threads"));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why a batcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum BatcherError {
    #[error("a batcher needs at least one embedder")]
    NoWorkers,
    #[error("batcher options: {0}")]
    Option(String),
}

fn decode_loop(shared: &Shared, pool: &rayon::ThreadPool) {
    loop {
        let job = {
            let mut st = shared.state.lock().expect("batcher state");
            loop {
                let room = st.pending.front().is_some_and(|p| {
                    // the oldest pending input fits beside what waits (or nothing waits)
                    st.ready_tokens == 0
                        || st.ready_tokens + p.tokens <= shared.options.max_ready_tokens
                });
                if room {
                    break;
                }
                if st.closing && st.pending.is_empty() {
                    return;
                }
                st = shared.decode_cv.wait(st).expect("batcher state");
            }
            let job = st.pending.pop_front().expect("checked above");
            st.decoding += 1;
            // reserve the input's place in the ready set while it decodes
            st.ready_tokens += job.tokens;
            job
        };
        let started = Instant::now();
        if job.cancel.is_cancelled() {
            finish_decode(shared, job.tokens, 0, None);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            (job.done)(Err(JobError::Cancelled));
            continue;
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.install(|| {
                glm5v_prep::prep_images(std::slice::from_ref(&job.source), &shared.prep)
            })
        }));
        let timings = JobTimings {
            queue: started - job.submitted,
            decode: started.elapsed(),
            ..JobTimings::default()
        };
        let batch = match result {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                finish_decode(shared, job.tokens, 0, None);
                (job.done)(Err(JobError::Input(e)));
                continue;
            }
            Err(_) => {
                finish_decode(shared, job.tokens, 0, None);
                (job.done)(Err(JobError::DecoderPanic {
                    input: job.source.name(),
                }));
                continue;
            }
        };
        let grid = batch.image_grid_thw[0].map(|v| v as usize);
        let tokens = grid.iter().product::<usize>() / shared.merge_unit;
        debug_assert_eq!(
            batch.pixel_values.len(),
            grid.iter().product::<usize>() * shared.patch_dim
        );
        let decoded = Decoded {
            pixels: batch.pixel_values,
            grid,
            tokens,
            cancel: job.cancel,
            done: job.done,
            timings,
            decoded: Instant::now(),
        };
        finish_decode(shared, job.tokens, tokens, Some((job.seq, decoded)));
    }
}

/// A decoder is done with an input: its reservation of `reserved` tokens becomes `tokens`
/// ready ones (or nothing, when it failed).
fn finish_decode(shared: &Shared, reserved: usize, tokens: usize, decoded: Option<(u64, Decoded)>) {
    let mut st = shared.state.lock().expect("batcher state");
    st.decoding -= 1;
    st.ready_tokens = st.ready_tokens - reserved + tokens;
    let ready = decoded.is_some();
    if let Some((seq, d)) = decoded {
        st.ready.insert(seq, d);
    }
    let closing = st.closing;
    drop(st);
    if closing {
        // the workers wait for the last decode to see the end
        shared.ready_cv.notify_all();
    } else if ready {
        // every worker: one waiting for a fuller batch behind its forward in flight must not
        // be the only one woken while another device is idle
        shared.ready_cv.notify_all();
    }
    if !ready {
        shared.decode_cv.notify_one();
    }
}

fn worker_loop(shared: &Shared, embedder: &Embedder, worker: usize) {
    if let Some(queue) = embedder.tower().queued() {
        return queued::worker_loop(shared, embedder, queue, worker);
    }
    // The batch's pixels, gathered here: kept from one forward to the next, so that a batch
    // copies into memory already mapped (a fresh buffer of a full GPU batch, ~300 MB, costs
    // tens of ms in page faults alone). It holds the largest batch seen.
    let mut gather = Vec::new();
    loop {
        let batch = {
            let mut st = shared.state.lock().expect("batcher state");
            loop {
                if !st.ready.is_empty() {
                    break;
                }
                if st.closing && st.pending.is_empty() && st.decoding == 0 {
                    drop(st);
                    wake_all(shared);
                    return;
                }
                st = shared.ready_cv.wait(st).expect("batcher state");
            }
            take_ready(shared, &mut st)
        };
        shared.decode_cv.notify_all();
        run_batch(shared, embedder, worker, batch, &mut gather);
    }
}

/// Wakes the other workers and the decoders, so that they see the end too.
fn wake_all(shared: &Shared) {
    shared.ready_cv.notify_all();
    shared.decode_cv.notify_all();
}

/// Takes the decoded inputs, oldest first, up to the forward's budget (at least one).
fn take_ready(shared: &Shared, st: &mut State) -> Vec<Decoded> {
    let mut taken = Vec::new();
    let mut tokens = 0;
    while let Some(entry) = st.ready.first_entry() {
        let t = entry.get().tokens;
        if !taken.is_empty() && tokens + t > shared.options.max_batch_tokens {
            break;
        }
        tokens += t;
        taken.push(entry.remove());
    }
    st.ready_tokens -= tokens;
    st.running += taken.len();
    taken
}

/// Copies the inputs' pixels, in order, into `dst` (exactly their total length) in pieces of at
/// most [`GATHER_PIECE`] floats spread over the current rayon pool (one thread's copy of a full
/// GPU batch is tens of ms the tower waits for).
fn gather_into(srcs: &[&[f32]], dst: &mut [f32]) {
    use rayon::prelude::*;
    let total: usize = srcs.iter().map(|p| p.len()).sum();
    assert_eq!(
        dst.len(),
        total,
        "gather: the buffer holds the batch exactly"
    );
    let mut pieces: Vec<(&[f32], &mut [f32])> = Vec::new();
    let mut rest: &mut [f32] = dst;
    for p in srcs {
        for src in p.chunks(GATHER_PIECE) {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(src.len());
            pieces.push((src, head));
            rest = tail;
        }
    }
    pieces
        .into_par_iter()
        .for_each(|(src, dst)| dst.copy_from_slice(src));
}

/// [`gather_into`] the front of `dst`, grown when too short, never shrunk or cleared (each
/// float is written once). Returns the gathered floats.
fn gather_pixels<'a>(srcs: &[&[f32]], dst: &'a mut Vec<f32>) -> &'a [f32] {
    let total: usize = srcs.iter().map(|p| p.len()).sum();
    if dst.len() < total {
        dst.resize(total, 0.0);
    }
    gather_into(srcs, &mut dst[..total]);
    &dst[..total]
}

/// Floats per parallel piece of [`gather_into`] (1 MiB).
const GATHER_PIECE: usize = 1 << 18;

/// The inputs of a taken batch whose callers still want them; the cancelled ones are answered
/// [`JobError::Cancelled`] and leave the running count.
fn live_inputs(shared: &Shared, batch: Vec<Decoded>) -> Vec<Decoded> {
    let (live, cancelled): (Vec<Decoded>, Vec<Decoded>) =
        batch.into_iter().partition(|d| !d.cancel.is_cancelled());
    let n = cancelled.len();
    for d in cancelled {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        (d.done)(Err(JobError::Cancelled));
    }
    if n > 0 {
        shared.state.lock().expect("batcher state").running -= n;
    }
    live
}

/// How a forward went, for its inputs' timings and the batch report.
struct Ran {
    /// When its gather began.
    started: Instant,
    gather: Duration,
    forward: Duration,
    device: Option<Duration>,
}

/// Hands each input its rows of the batch's output `out` (a view, not a copy: the output is
/// freed when the last input's rows are dropped), reports the batch, and leaves the running
/// count.
fn deliver(
    shared: &Shared,
    worker: usize,
    live: Vec<Decoded>,
    out: ndarray::Array2<f32>,
    items: &[crate::embedder::ItemSpan],
    ran: Ran,
) {
    let n = live.len();
    let tokens: usize = live.iter().map(|d| d.tokens).sum();
    shared.batches.fetch_add(1, Ordering::Relaxed);
    if let Some(cb) = &shared.on_batch {
        cb(&BatchReport {
            worker,
            items: n,
            tokens,
            gather: ran.gather,
            forward: ran.forward,
            device: ran.device,
        });
    }
    let batch_rows = out.into_shared();
    for (d, span) in live.into_iter().zip(items) {
        let rows = batch_rows.clone().slice_move(s![
            span.token_offset..span.token_offset + span.token_count,
            ..
        ]);
        let timings = JobTimings {
            wait: ran.started.saturating_duration_since(d.decoded),
            gather: ran.gather,
            forward: ran.forward,
            ..d.timings
        };
        (d.done)(Ok(JobOutput {
            embeddings: rows,
            grid: d.grid,
            timings,
            batch_tokens: tokens,
            batch_items: n,
            worker,
        }));
    }
    shared.state.lock().expect("batcher state").running -= n;
}

/// A forward failed (a tower error or a panic, not an input's fault): its inputs get
/// `message`, and the batcher is broken.
fn fail(shared: &Shared, live: Vec<Decoded>, message: &str) {
    shared.broken.store(true, Ordering::Relaxed);
    let n = live.len();
    for d in live {
        (d.done)(Err(JobError::Backend(message.to_string())));
    }
    shared.state.lock().expect("batcher state").running -= n;
}

/// One forward on a tower that runs on the host's threads: gather, forward, deliver.
fn run_batch(
    shared: &Shared,
    embedder: &Embedder,
    worker: usize,
    batch: Vec<Decoded>,
    gather: &mut Vec<f32>,
) {
    let live = live_inputs(shared, batch);
    if live.is_empty() {
        return;
    }
    let started = Instant::now();
    let rows: usize = live.iter().map(|d| d.pixels.len() / shared.patch_dim).sum();
    let srcs: Vec<&[f32]> = live.iter().map(|d| d.pixels.as_slice()).collect();
    let pixels = embedder.install(|| gather_pixels(&srcs, gather));
    let grids: Vec<Grid> = live.iter().map(|d| d.grid).collect();
    let view = ArrayView2::from_shape((rows, shared.patch_dim), pixels).expect("whole rows");
    let gathered = started.elapsed();
    let result = catch_unwind(AssertUnwindSafe(|| embedder.embed_pixels(view, &grids)));
    let forward = started.elapsed() - gathered;
    match result {
        Ok(Ok(out)) => {
            let ran = Ran {
                started,
                gather: gathered,
                forward,
                device: None,
            };
            deliver(shared, worker, live, out.embeddings, &out.items, ran);
        }
        Ok(Err(e)) => fail(shared, live, &e.to_string()),
        Err(_) => fail(shared, live, "the forward panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::{GATHER_PIECE, gather_pixels};

    /// Inputs of several pieces each, one under a piece, one empty, into a buffer left longer
    /// by a bigger batch before: the result is the concatenation, whatever the buffer held.
    #[test]
    fn gather_is_the_concatenation() {
        let sizes = [
            2 * GATHER_PIECE + 17,
            5,
            0,
            GATHER_PIECE,
            3 * GATHER_PIECE - 1,
        ];
        let inputs: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 1_000_003 + j) as f32).collect())
            .collect();
        let want: Vec<f32> = inputs.iter().flatten().copied().collect();
        let mut buf = vec![f32::NAN; want.len() + 12345];
        let srcs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let got = gather_pixels(&srcs, &mut buf);
        assert_eq!(got.len(), want.len());
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // a smaller batch after it, into the same buffer
        let got = gather_pixels(&srcs[1..2], &mut buf).to_vec();
        assert_eq!(got, inputs[1]);
        // into an empty buffer
        let mut empty = Vec::new();
        assert_eq!(gather_pixels(&srcs[3..4], &mut empty), &inputs[3][..]);
    }
}
