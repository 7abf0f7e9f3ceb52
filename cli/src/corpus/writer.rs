//! The dataset's writing, off the thread that receives the results. A GPU makes the rows of the
//! GLM-5.3-Flash geometry at about 1.5 GB/s (f32); arrow-rs copies a binary value three times
//! while it encodes it (into the encoder, the page, the page with its levels) before the file
//! write copies it into the page cache, which on one thread kept the GPU of a corpus run idle
//! more than half of the time. Here:
//!
//! - the receiving thread hands each row group (about [`ROW_GROUP_BYTES`] of rows, never
//!   across shards) to a pool of encoders, numbered in order;
//! - an encoder builds the record batch (the rows' one copy: f32 as they are, or bf16) and
//!   encodes it with arrow-rs's column writers (its parallel-encoding interface,
//!   [`ArrowRowGroupWriterFactory`]) into column chunks;
//! - one writer thread appends the chunks to the shard's file in their order, and when a shard is
//!   whole writes its footer, then leaves the fsync and the rename to a thread of their own (at
//!   most one at a time) so that the next shard's rows keep flowing.
//!
//! At most `encoders + 1` row groups are between the receiving thread and the file; the
//! receiving thread waits for room (what bounds memory). The first error stops the pipeline: it
//! is returned to the receiving thread at its next call, and no shard is renamed after it
//! (temporary files of unfinished shards are removed).

use super::dataset::{Dtype, Row, record_batch};
use anyhow::{Context, Result, anyhow};
use arrow_schema::Schema;
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::file::metadata::KeyValue;
use parquet::file::writer::SerializedFileWriter;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Bytes of rows in a row group, at least (a group ends with the row that reaches it; see the
/// module doc for what bounds memory). Under glibc's largest mmap threshold (32 MiB), so that
/// the encoders' buffers come from reused heap memory rather than fresh pages each group:
/// 640 rows of 6 MiB into /dev/shm took 1.5-2.8 s at 16 MiB against 4.5-5.7 s at 32 MiB and
/// 6.3-7.2 s at 64 MiB (one encoder, the 2-core Xeon, 2026-12-06; fresh pages' faults and
/// zeroing were a third of the encoder's time). Measured by changing this constant under what is
/// now `bench writer --dir /dev/shm --count 640`, which times the committed value.
pub const ROW_GROUP_BYTES: usize = 16 << 20;

/// A shard about to receive row groups: its file writer (created by the receiving thread, which
/// also made the encoders' factory from it) and where it goes when whole.
pub struct NewShard {
    pub file: SerializedFileWriter<File>,
    pub temp: PathBuf,
    pub dest: PathBuf,
}

/// One row group for an encoder.
struct Job {
    seq: u64,
    factory: Arc<ArrowRowGroupWriterFactory>,
    /// The row group's index within its shard.
    index: usize,
    rows: Vec<Row>,
    /// The shard it goes to (for errors).
    dest: Arc<PathBuf>,
}

/// What the writer thread takes, in `seq` order.
enum Step {
    Open(Box<NewShard>),
    Group(Vec<ArrowColumnChunk>),
    /// The shard is whole: these footer entries, then fsync and rename.
    Close(Vec<KeyValue>),
}

/// State shared by the pipeline's threads.
struct Shared {
    /// Row groups handed to the encoders and not yet appended to a file.
    in_flight: Mutex<usize>,
    room: Condvar,
    /// The first error of any thread.
    error: Mutex<Option<String>>,
    failed: AtomicBool,
}

impl Shared {
    fn fail(&self, e: anyhow::Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(format!("{e:#}"));
        }
        drop(slot);
        // under the lock `group` checks `failed` with: it cannot miss this wakeup
        let room = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        self.failed.store(true, Ordering::SeqCst);
        drop(room);
        self.room.notify_all();
    }

    fn error(&self) -> Option<anyhow::Error> {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| anyhow!("{m}"))
    }

    fn release(&self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        drop(n);
        self.room.notify_all();
    }
}

/// Fails the pipeline when the thread holding it unwinds (a panic in an encoder or the writer
/// would otherwise leave the receiving thread waiting for room that never comes).
struct PanicGuard<'a>(&'a Shared, &'static str);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail(anyhow!("the Parquet {} thread panicked", self.1));
        }
    }
}

/// The encoders and the writer thread of one dataset run.
pub struct Pipeline {
    jobs: Option<SyncSender<Job>>,
    steps: Option<Sender<(u64, Step)>>,
    encoders: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<usize>>,
    shared: Arc<Shared>,
    limit: usize,
    next_seq: u64,
}

/// Encoder threads for this machine: a quarter of its cores, 1 to 4.
pub fn default_encoders() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() / 4)
        .unwrap_or(1)
        .clamp(1, 4)
}

impl Pipeline {
    pub fn start(schema: Arc<Schema>, dtype: Dtype, encoders: usize) -> Result<Self> {
        let encoders = encoders.max(1);
        let shared = Arc::new(Shared {
            in_flight: Mutex::new(0),
            room: Condvar::new(),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
        });
        let (jobs, job_rx) = sync_channel::<Job>(encoders);
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (steps, step_rx) = channel::<(u64, Step)>();
        let mut handles = Vec::with_capacity(encoders);
        for i in 0..encoders {
            let (rx, tx, shared, schema) = (
                job_rx.clone(),
                steps.clone(),
                shared.clone(),
                schema.clone(),
            );
            handles.push(
                std::thread::Builder::new()
                    .name(format!("glm5v-encode-{i}"))
                    .spawn(move || encode_loop(&rx, &tx, &shared, &schema, dtype))
                    .context("cannot start a Parquet encoder thread")?,
            );
        }
        let ws = shared.clone();
        let writer = std::thread::Builder::new()
            .name("glm5v-write".into())
            .spawn(move || write_loop(step_rx, &ws))
            .context("cannot start the Parquet writer thread")?;
        Ok(Self {
            jobs: Some(jobs),
            steps: Some(steps),
            encoders: handles,
            writer: Some(writer),
            shared,
            limit: encoders + 1,
            next_seq: 0,
        })
    }

    /// The pipeline's first error, if any.
    pub fn check(&self) -> Result<()> {
        match self.shared.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    fn step(&mut self, step: Step) -> Result<()> {
        self.check()?;
        let seq = self.seq();
        self.steps
            .as_ref()
            .expect("running")
            .send((seq, step))
            .map_err(|_| self.stopped())
    }

    fn stopped(&self) -> anyhow::Error {
        self.shared
            .error()
            .unwrap_or_else(|| anyhow!("the Parquet writer stopped"))
    }

    pub fn open(&mut self, shard: NewShard) -> Result<()> {
        let temp = shard.temp.clone();
        let r = self.step(Step::Open(Box::new(shard)));
        if r.is_err() {
            // not handed over (the step was dropped with its file): nothing else removes it
            let _ = std::fs::remove_file(&temp);
        }
        r
    }

    pub fn close(&mut self, footer: Vec<KeyValue>) -> Result<()> {
        self.step(Step::Close(footer))
    }

    /// Hands a row group to the encoders, once fewer than the limit are in flight.
    pub fn group(
        &mut self,
        factory: &Arc<ArrowRowGroupWriterFactory>,
        dest: &Arc<PathBuf>,
        index: usize,
        rows: Vec<Row>,
    ) -> Result<()> {
        {
            let mut n = self
                .shared
                .in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            while *n >= self.limit && !self.shared.failed.load(Ordering::SeqCst) {
                n = self.shared.room.wait(n).unwrap_or_else(|p| p.into_inner());
            }
            *n += 1;
        }
        self.check()?;
        let seq = self.seq();
        let job = Job {
            seq,
            factory: factory.clone(),
            index,
            rows,
            dest: dest.clone(),
        };
        self.jobs
            .as_ref()
            .expect("running")
            .send(job)
            .map_err(|_| self.stopped())
    }

    /// Waits for every step handed over; the shards renamed into place.
    pub fn finish(mut self) -> Result<usize> {
        let written = self.join();
        self.check()?;
        written.ok_or_else(|| anyhow!("the Parquet writer thread panicked"))
    }

    fn join(&mut self) -> Option<usize> {
        drop(self.jobs.take());
        drop(self.steps.take());
        for h in self.encoders.drain(..) {
            if h.join().is_err() {
                self.shared
                    .fail(anyhow!("a Parquet encoder thread panicked"));
            }
        }
        self.writer.take().and_then(|h| h.join().ok())
    }
}

impl Drop for Pipeline {
    /// A run that ends early (an error elsewhere) starts no more shard closes (one already
    /// closing, whole, is still renamed into place).
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.shared
                .fail(anyhow!("the run ended before the dataset was finished"));
            self.join();
        }
    }
}

fn encode_loop(
    jobs: &Mutex<Receiver<Job>>,
    steps: &Sender<(u64, Step)>,
    shared: &Shared,
    schema: &Arc<Schema>,
    dtype: Dtype,
) {
    let _guard = PanicGuard(shared, "encoder");
    loop {
        let job = match jobs.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        if shared.failed.load(Ordering::SeqCst) {
            continue;
        }
        let (seq, dest) = (job.seq, job.dest.clone());
        match encode(job, schema, dtype) {
            Ok(chunks) => {
                if steps.send((seq, Step::Group(chunks))).is_err() {
                    shared.fail(anyhow!("the Parquet writer thread stopped"));
                    return;
                }
            }
            Err(e) => shared.fail(e.context(format!("cannot write {}", dest.display()))),
        }
    }
}

/// One row group's column chunks.
fn encode(job: Job, schema: &Arc<Schema>, dtype: Dtype) -> Result<Vec<ArrowColumnChunk>> {
    let batch = record_batch(schema, &job.rows, dtype)?;
    drop(job.rows);
    let mut writers = job.factory.create_column_writers(job.index)?;
    let mut w = writers.iter_mut();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        for leaf in compute_leaves(field, column)? {
            w.next()
                .context("a column writer for each leaf column")?
                .write(&leaf)?;
        }
    }
    drop(batch);
    writers
        .into_iter()
        .map(|w| Ok(w.close()?))
        .collect::<Result<Vec<_>>>()
}

/// The shard the writer thread is filling; its temporary file is removed unless it was handed
/// to a closer.
struct Open {
    file: Option<SerializedFileWriter<File>>,
    temp: PathBuf,
    dest: PathBuf,
}

impl Drop for Open {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

fn write_loop(steps: Receiver<(u64, Step)>, shared: &Shared) -> usize {
    let _guard = PanicGuard(shared, "writer");
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    let mut w = Writer {
        shared,
        open: None,
        closer: None,
        renamed: 0,
    };
    for (seq, step) in steps {
        waiting.insert(seq, step);
        while let Some(step) = waiting.remove(&next) {
            next += 1;
            let is_group = matches!(step, Step::Group(_));
            if shared.failed.load(Ordering::SeqCst) {
                discard(step);
            } else if let Err(e) = w.apply(step) {
                shared.fail(e);
            }
            if is_group {
                shared.release();
            }
        }
    }
    w.join_closer();
    // after an error: what never came to its turn (a row group an encoder failed on holds
    // up those after it), and the shard being filled, leave no temporary files
    for (_, step) in std::mem::take(&mut waiting) {
        discard(step);
    }
    w.renamed
}

/// A step not carried out (the run failed): a shard's temporary file is removed.
fn discard(step: Step) {
    if let Step::Open(s) = step {
        drop(s.file);
        let _ = std::fs::remove_file(&s.temp);
    }
}

/// The writer thread's state: the shard being filled, the shard being closed, the count of
/// shards renamed into place. Dropping it removes an unfinished shard's temporary file.
struct Writer<'a> {
    shared: &'a Shared,
    open: Option<Open>,
    closer: Option<JoinHandle<Result<()>>>,
    renamed: usize,
}

impl Writer<'_> {
    /// Waits for the shard being closed, if any: counted when renamed, else the run fails.
    fn join_closer(&mut self) {
        if let Some(h) = self.closer.take() {
            match h.join() {
                Ok(Ok(())) => self.renamed += 1,
                Ok(Err(e)) => self.shared.fail(e),
                Err(_) => self.shared.fail(anyhow!("a Parquet shard closer panicked")),
            }
        }
    }

    fn apply(&mut self, step: Step) -> Result<()> {
        match step {
            Step::Open(s) => {
                let s = *s;
                self.open = Some(Open {
                    file: Some(s.file),
                    temp: s.temp,
                    dest: s.dest,
                });
            }
            Step::Group(chunks) => {
                let shard = self.open.as_mut().context("a row group before its shard")?;
                let file = shard.file.as_mut().expect("open");
                let append = |file: &mut SerializedFileWriter<File>| -> Result<()> {
                    let mut rg = file.next_row_group()?;
                    for c in chunks {
                        c.append_to_row_group(&mut rg)?;
                    }
                    rg.close()?;
                    Ok(())
                };
                append(file).with_context(|| format!("cannot write {}", shard.temp.display()))?;
                start_writeback(file.inner());
            }
            Step::Close(footer) => self.close(footer)?,
        }
        Ok(())
    }

    /// The shard being filled is whole: its footer here, its fsync and rename on a thread of
    /// their own once the shard before has finished closing.
    fn close(&mut self, footer: Vec<KeyValue>) -> Result<()> {
        let mut shard = self
            .open
            .take()
            .context("a shard closed before it opened")?;
        let mut file = shard.file.take().expect("open");
        let (temp, dest) = (shard.temp.clone(), shard.dest.clone());
        for kv in footer {
            file.append_key_value_metadata(kv);
        }
        let written = file
            .into_inner()
            .with_context(|| format!("cannot write {}", temp.display()));
        // one shard's fsync at a time, beside the next shard's writing
        self.join_closer();
        if self.shared.failed.load(Ordering::SeqCst) {
            // the shard before failed to close: rename none after it
            drop(written);
            let _ = std::fs::remove_file(&temp);
            return Ok(());
        }
        let cleanup = temp.clone();
        let handle = std::thread::Builder::new()
            .name("glm5v-close-shard".into())
            .spawn(move || -> Result<()> {
                let done = written
                    .and_then(|f| {
                        f.sync_all()
                            .with_context(|| format!("cannot write {}", temp.display()))
                    })
                    .and_then(|()| {
                        std::fs::rename(&temp, &dest)
                            .with_context(|| format!("cannot write {}", dest.display()))
                    });
                if done.is_err() {
                    let _ = std::fs::remove_file(&temp);
                }
                done
            })
            .map_err(|e| {
                let _ = std::fs::remove_file(&cleanup);
                anyhow!("cannot start a thread to close {}: {e}", cleanup.display())
            })?;
        self.closer = Some(handle);
        Ok(())
    }
}

/// Starts the disk writes of what the file holds so far (Linux: `sync_file_range`, which only
/// schedules them), so that the fsync closing the shard waits for its last row groups, not the
/// whole shard: a run's last shard was 0.8-3.0 s of fsync at its end on the H100 host.
#[cfg(target_os = "linux")]
fn start_writeback(f: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a live descriptor; offset 0 and length 0 name the whole file. Advisory: a failure
    // leaves the writes to the closing fsync, which reports errors.
    unsafe {
        libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_: &File) {}
