//! The tower as a queue of forwards ([`QueuedTower`]), for the batcher: a batch's pixels are
//! staged in page-locked host memory and uploaded on a stream of their own while the forward
//! before it runs; the forward runs on the tower's stream (a CUDA graph when its layout has
//! one); its embeddings are downloaded on a third stream into page-locked memory while the
//! forward after it runs. Two slots, each with its staging memory, device buffers and events,
//! so two forwards can be queued at once (one running, the next uploaded behind it).
//!
//! The rows are the plain forward's bits: the same kernels, algorithms and graphs run on the
//! same inputs; only where the pixels come from and where the embeddings go differ
//! (`queued_forward_matches_forward` in `tests/device.rs`).
//!
//! `GLM5V_GPU_QUEUE=0` hides the queue from the batcher (every batch then runs through
//! [`GpuTower::forward_gpu`], pageable copies and all: for A/B timing).

use super::GpuTower;
use super::attention::{Geo, geo_stage_len};
use crate::device::{DBuf, Dt};
use crate::error::GpuError;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result, sys};
use glm5v_reference::geometry::{self, Grid};
use glm5v_reference::{Finished, QueuedTower, Ticket, TowerError};
use ndarray::Array2;
use std::sync::Arc;
use std::time::Duration;

/// Forwards queued at once.
const SLOTS: usize = 2;

/// Page-locked host memory of f32 (`cuMemHostAlloc`), freed on drop.
struct Pinned {
    ptr: *mut f32,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: plain host memory owned by this value; every access goes through `&self` /
// `&mut self`, and the device touches it only between an enqueue and the finish that waits for
// the copy (the slot is not handed out in between).
unsafe impl Send for Pinned {}
unsafe impl Sync for Pinned {}

impl Pinned {
    fn new(ctx: &Arc<CudaContext>, len: usize, what: &str) -> Result<Self, GpuError> {
        ctx.bind_to_thread()
            .map_err(|e| GpuError::cuda("cuCtxSetCurrent", e))?;
        let bytes = len.max(1) * 4;
        // SAFETY: a plain allocation; the pointer is freed once, in drop.
        let ptr = unsafe { result::malloc_host(bytes, 0) }.map_err(|e| {
            GpuError::cuda(
                format!("cuMemHostAlloc ({what}: {bytes} bytes of page-locked host memory)"),
                e,
            )
        })?;
        Ok(Self {
            ptr: ptr as *mut f32,
            len,
            ctx: ctx.clone(),
        })
    }

    fn slice(&self, len: usize) -> &[f32] {
        assert!(len <= self.len);
        // SAFETY: `len` floats inside the allocation, not written while borrowed.
        unsafe { std::slice::from_raw_parts(self.ptr, len) }
    }

    fn slice_mut(&mut self, len: usize) -> &mut [f32] {
        assert!(len <= self.len);
        // SAFETY: as above, borrowed mutably once.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host in `new`, freed once; no copy is in flight (a slot's
        // memory is dropped only when the slot is free or the tower goes away after a sync).
        unsafe {
            let _ = result::free_host(self.ptr as *mut std::ffi::c_void);
        }
    }
}

/// A buffer at least `len` long: `buf` itself, or a new one `grow` makes: the first exactly
/// `len` long (what [`QueuedTower::reserve`] sets aside), a replacement the next power of two,
/// so that batches past the reservation reallocate once or twice, not at each larger one (a
/// page-locked allocation of a few hundred MB costs tens of ms or more, a device one a sync).
fn at_least<T>(
    buf: &mut Option<T>,
    len: usize,
    have: impl Fn(&T) -> usize,
    grow: impl FnOnce(usize) -> Result<T, GpuError>,
) -> Result<bool, GpuError> {
    let size = match buf.as_ref() {
        Some(b) if have(b) >= len => return Ok(false),
        Some(_) => len.next_power_of_two(),
        None => len,
    };
    *buf = None; // free the old one first
    *buf = Some(grow(size)?);
    Ok(true)
}

/// What a queued forward keeps until it is finished.
struct Job {
    ticket: Ticket,
    /// Embeddings `[g, o]`, downloaded into the slot's `host_out`.
    g: usize,
    /// The plain forward's output buffer and geometry (freed once the download is done);
    /// `None` for a graph replay (its output was copied into `dev_out`).
    plain: Option<(DBuf, Geo)>,
}

struct Slot {
    host_in: Option<Pinned>,
    host_out: Option<Pinned>,
    /// A plain forward's geometry (rope tables, query tiles) on its way to the device: from
    /// page-locked memory its copies need not wait for the forward before.
    host_geo: Option<Pinned>,
    /// Copies from `host_geo` may be queued on the tower's stream without a job to finish
    /// them (an enqueue that failed after staging its geometry): wait for that stream before
    /// the staging is written or freed again.
    geo_pending: bool,
    dev_in: Option<DBuf>,
    dev_out: Option<DBuf>,
    /// Recorded on the upload stream around the pixels' copy (timing); on the tower's stream
    /// around the forward (timing); on the download stream after the embeddings' copy.
    upload_began: CudaEvent,
    uploaded: CudaEvent,
    began: CudaEvent,
    computed: CudaEvent,
    downloaded: CudaEvent,
    job: Option<Job>,
}

/// The queue's streams and slots (under the tower's `queue` lock).
pub(super) struct Queue {
    /// The tower's stream (the staged geometry's copies run on it).
    tower: Arc<CudaStream>,
    up: Arc<CudaStream>,
    down: Arc<CudaStream>,
    slots: Vec<Slot>,
    next: u64,
}

impl Queue {
    pub(super) fn new(ctx: &Arc<CudaContext>, tower: &Arc<CudaStream>) -> Result<Self, GpuError> {
        let stream = || {
            ctx.new_stream()
                .map_err(|e| GpuError::cuda("cuStreamCreate", e))
        };
        let event = |flags| {
            ctx.new_event(Some(flags))
                .map_err(|e| GpuError::cuda("cuEventCreate", e))
        };
        use sys::CUevent_flags as F;
        let mut slots = Vec::with_capacity(SLOTS);
        for _ in 0..SLOTS {
            slots.push(Slot {
                host_in: None,
                host_out: None,
                host_geo: None,
                geo_pending: false,
                dev_in: None,
                dev_out: None,
                upload_began: event(F::CU_EVENT_DEFAULT)?,
                uploaded: event(F::CU_EVENT_DEFAULT)?,
                began: event(F::CU_EVENT_DEFAULT)?,
                computed: event(F::CU_EVENT_DEFAULT)?,
                // the worker sleeps on it instead of spinning a core for a whole forward
                downloaded: event(F::CU_EVENT_BLOCKING_SYNC)?,
                job: None,
            });
        }
        Ok(Self {
            tower: tower.clone(),
            up: stream()?,
            down: stream()?,
            slots,
            next: 0,
        })
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // no copy may still read or write a slot's memory when it is freed
        let _ = self.tower.synchronize();
        let _ = self.up.synchronize();
        let _ = self.down.synchronize();
    }
}

/// Whether the batcher sees the queue (`GLM5V_GPU_QUEUE=0` hides it).
pub(super) fn queue_enabled() -> bool {
    std::env::var("GLM5V_GPU_QUEUE").as_deref() != Ok("0")
}

/// `GLM5V_GPU_QUEUE_LOG=1`: one stderr line per queued forward's enqueue and finish, with the
/// milliseconds of each phase (where a batcher's host time goes).
struct Log {
    on: bool,
    last: std::cell::Cell<std::time::Instant>,
}

impl Log {
    fn start() -> Self {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        Self {
            on: *ON.get_or_init(|| std::env::var("GLM5V_GPU_QUEUE_LOG").as_deref() == Ok("1")),
            last: std::cell::Cell::new(std::time::Instant::now()),
        }
    }

    /// Milliseconds since the last lap (or the start).
    fn lap(&self) -> f64 {
        let now = std::time::Instant::now();
        let ms = (now - self.last.get()).as_secs_f64() * 1e3;
        self.last.set(now);
        ms
    }

    fn line(&self, f: impl FnOnce() -> String) {
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        if self.on {
            let t = T0
                .get_or_init(std::time::Instant::now)
                .elapsed()
                .as_secs_f64();
            eprintln!("glm5v: queue: [{t:.3} s] {}", f());
        }
    }
}

/// Values a slot's buffers hold for a batch of some number of patch rows.
#[derive(Clone, Copy)]
struct SlotSizes {
    /// Pixel values in (host staging and device).
    pixels: usize,
    /// Embeddings out (device and host staging).
    out: usize,
    /// A plain forward's geometry (host staging).
    geo: usize,
}

impl SlotSizes {
    /// Whether `slot`'s page-locked staging is smaller than these sizes.
    fn short(self, slot: &Slot) -> bool {
        slot.host_in.as_ref().is_none_or(|b| b.len < self.pixels)
            || slot.host_out.as_ref().is_none_or(|b| b.len < self.out)
            || slot.host_geo.as_ref().is_none_or(|b| b.len < self.geo)
    }
}

impl GpuTower {
    fn slot_sizes(&self, rows: usize) -> SlotSizes {
        let cfg = &self.cfg;
        SlotSizes {
            pixels: rows * cfg.patch_dim(),
            out: rows / cfg.merge_unit() * cfg.out_hidden_size,
            geo: geo_stage_len(rows, cfg.head_dim()),
        }
    }

    fn queue_guard(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot's staging and device buffers, grown to hold a batch of `rows` patch rows.
    fn slot_buffers(&self, slot: &mut Slot, rows: usize) -> Result<(), GpuError> {
        // A free slot's copies are done (its last forward was finished, or failed before its
        // job was kept: then wait for what it queued before reusing or freeing its memory).
        for (e, what) in [(&slot.uploaded, "upload"), (&slot.downloaded, "download")] {
            e.synchronize()
                .map_err(|e| GpuError::cuda(format!("queued {what} (event synchronize)"), e))?;
        }
        if slot.geo_pending {
            self.dev.sync("a failed queued forward's staged geometry")?;
            slot.geo_pending = false;
        }
        let dev = &self.dev;
        let size = self.slot_sizes(rows);
        let ctx = &dev.ctx;
        at_least(
            &mut slot.host_in,
            size.pixels,
            |b| b.len,
            |n| Pinned::new(ctx, n, "staged pixel values"),
        )?;
        at_least(
            &mut slot.host_out,
            size.out,
            |b| b.len,
            |n| Pinned::new(ctx, n, "staged embeddings"),
        )?;
        at_least(
            &mut slot.host_geo,
            size.geo,
            |b| b.len,
            |n| Pinned::new(ctx, n, "staged geometry"),
        )?;
        let grown_in = at_least(
            &mut slot.dev_in,
            size.pixels,
            |b| b.len,
            |n| dev.alloc("queued pixel values [N, patch_dim] f32", n, Dt::F32),
        )?;
        let grown_out = at_least(
            &mut slot.dev_out,
            size.out,
            |b| b.len,
            |n| dev.alloc("queued embeddings [G, O] f32", n, Dt::F32),
        )?;
        if grown_in || grown_out {
            // allocated in the tower's stream order: usable from the other streams once done
            dev.sync("queue buffers")?;
        }
        Ok(())
    }

    /// Staging for `rows` rows in the first free slot without it; whether another slot still
    /// lacks it.
    fn reserve_gpu(&self, rows: usize) -> Result<bool, GpuError> {
        let size = self.slot_sizes(rows);
        self.dev.bind()?;
        let mut q = self.queue_guard();
        let log = Log::start();
        if let Some(slot) = q
            .slots
            .iter_mut()
            .find(|s| s.job.is_none() && size.short(s))
        {
            self.slot_buffers(slot, rows)?;
            log.line(|| format!("reserved {rows} rows for a slot in {:.1} ms", log.lap()));
        }
        Ok(q.slots.iter().any(|s| size.short(s)))
    }

    fn enqueue_gpu(
        &self,
        rows: usize,
        grids: &[Grid],
        fill: &mut (dyn FnMut(&mut [f32]) + Send),
    ) -> Result<Ticket, GpuError> {
        let cfg = &self.cfg;
        let p = cfg.patch_dim();
        geometry::validate_pixels(cfg, rows, p, grids)?;
        let (o, g) = (cfg.out_hidden_size, rows / cfg.merge_unit());
        let dev = &self.dev;
        // the raw copies below name no context: the batcher's thread must have this one current
        dev.bind()?;
        let mut q = self.queue_guard();
        let ticket = Ticket(q.next);
        q.next += 1;
        let q = &mut *q;
        let s = q
            .slots
            .iter()
            .position(|s| s.job.is_none())
            .ok_or_else(|| {
                GpuError::Unsupported(format!(
                    "{SLOTS} forwards are queued already: finish one before queueing another"
                ))
            })?;
        let slot = &mut q.slots[s];
        let log = Log::start();
        self.slot_buffers(slot, rows)?;
        let t_alloc = log.lap();
        let host_in = slot.host_in.as_mut().expect("allocated above");
        fill(host_in.slice_mut(rows * p));
        let t_fill = log.lap();
        let dev_in = slot.dev_in.as_ref().expect("allocated above");
        let dev_out = slot.dev_out.as_ref().expect("allocated above");
        let src = host_in.slice(rows * p);
        slot.upload_began
            .record(&q.up)
            .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
        // SAFETY: page-locked source of exactly the copied length, a device buffer at least as
        // long; the slot is not reused before `finish` has waited for this copy's stream.
        unsafe {
            result::memcpy_htod_async(dev_in.ptr, src, q.up.cu_stream())
                .map_err(|e| GpuError::cuda("cuMemcpyHtoDAsync (queued pixels)", e))?;
        }
        slot.uploaded
            .record(&q.up)
            .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
        let stream = &dev.stream;
        let mut t_geo = 0.0;
        let plain = {
            let mut st = self.guard();
            let t_lock = log.lap();
            let plain = match self.graph_for(&mut st, grids, rows)? {
                Some(i) => {
                    stream
                        .wait(&slot.uploaded)
                        .map_err(|e| GpuError::cuda("cuStreamWaitEvent", e))?;
                    slot.began
                        .record(stream)
                        .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
                    dev.copy(dev_in, st.input(i), rows * p * 4)?;
                    self.replay(&mut st, i, None)?;
                    dev.copy(st.output(i), dev_out, g * o * 4)?;
                    None
                }
                None => {
                    // the geometry goes through the slot's page-locked staging: its copies
                    // are queued behind the forward before instead of waiting for it
                    let stage = slot.host_geo.as_mut().expect("allocated above");
                    let len = self.slot_sizes(rows).geo;
                    // cleared when the job is kept (its finish waits for these copies)
                    slot.geo_pending = true;
                    let geo = self.geo_staged(grids, false, Some(stage.slice_mut(len)))?;
                    t_geo = log.lap();
                    stream
                        .wait(&slot.uploaded)
                        .map_err(|e| GpuError::cuda("cuStreamWaitEvent", e))?;
                    slot.began
                        .record(stream)
                        .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
                    let out = self.forward_dev(dev_in, &geo, &mut None)?;
                    Some((out, geo))
                }
            };
            // still under the tower's lock: no other thread's graph capture on the tower's
            // stream may take in this event, nor the download stream that waits on it
            slot.computed
                .record(stream)
                .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
            q.down
                .wait(&slot.computed)
                .map_err(|e| GpuError::cuda("cuStreamWaitEvent", e))?;
            let from = plain.as_ref().map_or(dev_out.ptr, |(out, _)| out.ptr);
            let host_out = slot.host_out.as_mut().expect("allocated above");
            // SAFETY: `g * o` f32 into page-locked memory of at least that length, from a
            // device buffer of at least that length kept alive (in `plain` or the slot) until
            // `finish`.
            unsafe {
                result::memcpy_dtoh_async(host_out.slice_mut(g * o), from, q.down.cu_stream())
                    .map_err(|e| GpuError::cuda("cuMemcpyDtoHAsync (queued embeddings)", e))?;
            }
            slot.downloaded
                .record(&q.down)
                .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
            log.line(|| {
                format!(
                    "enqueue {ticket:?}: {rows} rows, {} grids, {}: buffers {t_alloc:.1} ms, \
                     fill {t_fill:.1} ms, lock {t_lock:.1} ms, geometry {t_geo:.1} ms, \
                     launch {:.1} ms",
                    grids.len(),
                    if plain.is_some() { "plain" } else { "graph" },
                    log.lap()
                )
            });
            plain
        };
        slot.job = Some(Job { ticket, g, plain });
        slot.geo_pending = false;
        Ok(ticket)
    }

    fn finish_gpu(&self, ticket: Ticket) -> Result<Finished, GpuError> {
        let o = self.cfg.out_hidden_size;
        self.dev.bind()?;
        let mut q = self.queue_guard();
        let slot = q
            .slots
            .iter_mut()
            .find(|s| s.job.as_ref().is_some_and(|j| j.ticket == ticket))
            .ok_or_else(|| {
                GpuError::Unsupported(format!("no queued forward {ticket:?} to finish"))
            })?;
        let job = slot.job.take().expect("found above");
        let log = Log::start();
        slot.downloaded
            .synchronize()
            .map_err(|e| GpuError::cuda("queued forward (event synchronize)", e))?;
        let t_wait = log.lap();
        let elapsed = |a: &CudaEvent, b: &CudaEvent| {
            a.elapsed_ms(b)
                .map(|ms| Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
                .map_err(|e| GpuError::cuda("cuEventElapsedTime", e))
        };
        let device = elapsed(&slot.began, &slot.computed)?;
        let upload = elapsed(&slot.upload_began, &slot.uploaded)?;
        let n = job.g * o;
        let src = slot.host_out.as_ref().expect("staged").slice(n);
        let mut v = vec![0f32; n];
        {
            use rayon::prelude::*;
            const PIECE: usize = 1 << 18;
            v.par_chunks_mut(PIECE)
                .zip(src.par_chunks(PIECE))
                .for_each(|(d, s)| d.copy_from_slice(s));
        }
        // freed in the tower's stream order (after the download waited on it), under the
        // tower's lock like every other call on its stream
        {
            let _tower = self.guard();
            drop(job.plain);
        }
        log.line(|| {
            format!(
                "finish {ticket:?}: waited {t_wait:.1} ms, device {:.1} ms, upload {:.1} ms, copy out {:.1} ms",
                device.as_secs_f64() * 1e3,
                upload.as_secs_f64() * 1e3,
                log.lap()
            )
        });
        Ok(Finished {
            embeddings: Array2::from_shape_vec((job.g, o), v).expect("sizes match"),
            device,
            upload,
        })
    }
}

impl QueuedTower for GpuTower {
    fn depth(&self) -> usize {
        SLOTS
    }

    fn reserve(&self, rows: usize) -> Result<bool, TowerError> {
        Ok(self.reserve_gpu(rows)?)
    }

    fn enqueue(
        &self,
        rows: usize,
        grid_thw: &[Grid],
        fill: &mut (dyn FnMut(&mut [f32]) + Send),
    ) -> Result<Ticket, TowerError> {
        Ok(self.enqueue_gpu(rows, grid_thw, fill)?)
    }

    fn finish(&self, ticket: Ticket) -> Result<Finished, TowerError> {
        Ok(self.finish_gpu(ticket)?)
    }
}
