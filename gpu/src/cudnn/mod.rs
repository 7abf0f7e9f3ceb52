//! cuDNN's fused attention (the backend API's `SDPA_FWD` operation: one flash-style kernel per
//! call, Hopper-tuned by NVIDIA) behind the same contract as our own kernels: q, k, v head-major
//! `[heads, n, hd]`, the output token-major `[n, heads * hd]`, one call per run of consecutive
//! equal-length segments (the run's segments are the batch dimension; no mask is needed since
//! every segment attends to itself only).
//!
//! cuDNN is optional: it is loaded at run time (cudarc's dynamic loading) and used only when the
//! library is present and builds a plan; otherwise the tower keeps its own kernels. Plans are built
//! once per shape (segment count, segment length, token count, input type) and cached.

use crate::error::GpuError;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::CudaStream;
use dnn::cudnnBackendAttributeName_t as A;
use dnn::cudnnBackendAttributeType_t as T;
use dnn::cudnnBackendDescriptorType_t as D;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

mod knobs;
use knobs::EngineChoice;

/// Tensor ids of the graph (the variant pack binds pointers to them).
const UID_Q: i64 = 1;
const UID_K: i64 = 2;
const UID_V: i64 = 3;
const UID_O: i64 = 4;
const UID_SCALE: i64 = 5;

/// Whether libcudnn can be loaded (no panic when it cannot).
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { dnn::is_culib_present() }
}

fn check(op: &str, s: dnn::cudnnStatus_t) -> Result<(), GpuError> {
    if s == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Cudnn {
            op: op.to_string(),
            message: format!("{s:?}"),
        })
    }
}

/// An owned backend descriptor (destroyed on drop).
struct Desc(dnn::cudnnBackendDescriptor_t);

impl Desc {
    fn new(kind: D) -> Result<Self, GpuError> {
        let mut d: dnn::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: out-pointer valid for the call.
        check("cudnnBackendCreateDescriptor", unsafe {
            dnn::cudnnBackendCreateDescriptor(kind, &mut d)
        })?;
        Ok(Desc(d))
    }

    /// Sets attribute `name` to `count` elements of `ty` read from `data`.
    ///
    /// # Safety
    /// `data` points to `count` values of the C type that `ty` names.
    unsafe fn set(&self, name: A, ty: T, count: i64, data: *const c_void) -> Result<(), GpuError> {
        // SAFETY: forwarded to the caller.
        check(&format!("cudnnBackendSetAttribute({name:?})"), unsafe {
            dnn::cudnnBackendSetAttribute(self.0, name, ty, count, data)
        })
    }

    /// Sets attribute `name` to the single value `v`.
    ///
    /// # Safety
    /// `V` is the C type that `ty` names.
    unsafe fn set_value<V>(&self, name: A, ty: T, v: &V) -> Result<(), GpuError> {
        // SAFETY: one value of the stated type (the caller's contract).
        unsafe { self.set(name, ty, 1, (v as *const V).cast()) }
    }

    fn set_i64s(&self, name: A, v: &[i64]) -> Result<(), GpuError> {
        // SAFETY: v.len() i64 values.
        unsafe { self.set(name, T::CUDNN_TYPE_INT64, v.len() as i64, v.as_ptr().cast()) }
    }

    fn set_desc(&self, name: A, d: &Desc) -> Result<(), GpuError> {
        // SAFETY: a descriptor handle for a BACKEND_DESCRIPTOR attribute.
        unsafe { self.set_value(name, T::CUDNN_TYPE_BACKEND_DESCRIPTOR, &d.0) }
    }

    fn set_handle(&self, name: A, h: dnn::cudnnHandle_t) -> Result<(), GpuError> {
        // SAFETY: a cuDNN handle for a HANDLE attribute.
        unsafe { self.set_value(name, T::CUDNN_TYPE_HANDLE, &h) }
    }

    /// Reads one value of attribute `name` (of type `ty`) into `out`.
    ///
    /// # Safety
    /// `V` is the C type that `ty` names.
    unsafe fn get<V>(&self, name: A, ty: T, out: &mut V) -> Result<(), GpuError> {
        let mut cnt: i64 = 0;
        // SAFETY: one value of the stated type (the caller's contract).
        check(&format!("cudnnBackendGetAttribute({name:?})"), unsafe {
            dnn::cudnnBackendGetAttribute(self.0, name, ty, 1, &mut cnt, (out as *mut V).cast())
        })
    }

    /// The descriptors (of `kind`) that attribute `name` holds, at most `max`: cuDNN fills
    /// descriptors created here.
    fn get_descs(&self, name: A, kind: D, max: usize) -> Result<Vec<Desc>, GpuError> {
        let mut descs: Vec<Desc> = (0..max)
            .map(|_| Desc::new(kind))
            .collect::<Result<_, _>>()?;
        let mut raw: Vec<dnn::cudnnBackendDescriptor_t> = descs.iter().map(|d| d.0).collect();
        let mut got: i64 = 0;
        // SAFETY: `raw` holds `max` created descriptors of the attribute's kind to fill.
        check(&format!("cudnnBackendGetAttribute({name:?})"), unsafe {
            dnn::cudnnBackendGetAttribute(
                self.0,
                name,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                max as i64,
                &mut got,
                raw.as_mut_ptr().cast(),
            )
        })?;
        descs.truncate((got.max(0) as usize).min(max));
        Ok(descs)
    }

    fn finalize(&self, what: &str) -> Result<(), GpuError> {
        // SAFETY: a live descriptor.
        check(&format!("cudnnBackendFinalize({what})"), unsafe {
            dnn::cudnnBackendFinalize(self.0)
        })
    }
}

// SAFETY: a backend descriptor is a heap object owned by this value; it is mutated only while a
// plan is built (under the plan cache's mutex) and only read after it is finalized.
unsafe impl Send for Desc {}
unsafe impl Sync for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
            unsafe { dnn::cudnnBackendDestroyDescriptor(self.0) };
        }
    }
}

/// A 4-d tensor [b, h, s, d] with the given strides.
fn tensor(
    uid: i64,
    dims: [i64; 4],
    strides: [i64; 4],
    ty: dnn::cudnnDataType_t,
    by_value: bool,
) -> Result<Desc, GpuError> {
    let t = Desc::new(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    // SAFETY: each attribute gets one value of its C type.
    unsafe {
        t.set_value(A::CUDNN_ATTR_TENSOR_DATA_TYPE, T::CUDNN_TYPE_DATA_TYPE, &ty)?;
        if by_value {
            t.set_value(
                A::CUDNN_ATTR_TENSOR_IS_BY_VALUE,
                T::CUDNN_TYPE_BOOLEAN,
                &true,
            )?;
        }
    }
    t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &strides)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
    t.finalize("tensor")?;
    Ok(t)
}

/// The shape a plan is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SdpaShape {
    /// Segments in the run (the batch dimension).
    pub batch: usize,
    /// Tokens per segment.
    pub len: usize,
    /// Tokens of the whole packed sequence (the head stride of q, k, v is `n * hd`).
    pub n: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// q, k, v, o in IEEE half (else bf16).
    pub half: bool,
}

/// A finalized execution plan and what must outlive it.
struct Plan {
    plan: Desc,
    _cfg: Desc,
    /// The operation graph's descriptors (tensors, operation, graph, heuristics).
    _keep: Arc<Vec<Desc>>,
    /// The engine and knob descriptors of a configuration built here ([`knobs::build`]).
    _built: Vec<Desc>,
    workspace: usize,
    /// What the configuration chose (`None` when cuDNN would not say).
    choice: Option<EngineChoice>,
}

impl Plan {
    fn describe(&self) -> String {
        self.choice
            .as_ref()
            .map_or("engine ?".into(), EngineChoice::describe)
    }
}

/// One cuDNN handle on the tower's stream, with its plan cache.
pub struct Cudnn {
    handle: dnn::cudnnHandle_t,
    stream: Arc<CudaStream>,
    plans: Mutex<HashMap<SdpaShape, Arc<Plan>>>,
    /// One line per plan built: the shape, the engine chosen and, when timed, every candidate.
    log: Mutex<Vec<String>>,
    /// Whether large calls time their candidates (off in the batch-invariant mode: a timed
    /// choice can differ from process to process).
    tune: std::sync::atomic::AtomicBool,
    /// Whether a batch of segments runs the engine and knobs planned for one segment of their
    /// length (the batch-invariant mode), not the heuristics' choice for the batch.
    follow_single: std::sync::atomic::AtomicBool,
    /// The heuristics' candidate large calls take untimed (`GLM5V_CUDNN_CANDIDATE`).
    candidate: Mutex<Option<usize>>,
    /// Variant packs already built (see [`Pack`]); `None` when `GLM5V_CUDNN_PACKS=0`.
    packs: Option<Mutex<HashMap<PackKey, Pack>>>,
    pub version: usize,
}

/// What a variant pack binds: the plan's shape and the device addresses.
type PackKey = (SdpaShape, [u64; 5]);

/// Packs kept before the cache starts afresh (a few per segment length and buffer set).
const MAX_PACKS: usize = 4096;

/// A finalized variant pack and the scale it points to. A forward runs each segment's
/// attention with the same q, k, v, output and workspace addresses in all its blocks (and a
/// server's batches mostly reuse them), so a pack is built once and executed many times instead
/// of built for every call (descriptor creation, three attributes, finalize).
struct Pack {
    desc: Desc,
    _scale: Box<f32>,
}

/// Attention calls of at least this many FLOP choose their engine by timing every candidate
/// (on the H200 the heuristics' second choice ran the 2016x3024 image's attention 4% faster than
/// its first, while its first was best at 1008x1008); smaller ones take the heuristics' first.
pub const TUNE_MIN_FLOP: f64 = 5e10;

/// Segments of at least this many tokens take the heuristics' candidate
/// [`LONG_SEGMENT_CANDIDATE`] when the choice is not timed (the batch-invariant mode: a fixed
/// rule, the same in every process). Timed on the H100 (cuDNN 9.14, half, 16 heads of 64):
/// the heuristics' first (engine 5, kernel configuration 32) was fastest for 16 x 1024 and
/// 1 x 5184 tokens (0.152 / 0.246 ms against 0.155 / 0.260 for the second), the second (engine
/// 5, kernel configuration 7) for 1 x 31104 (7.72 against 8.15 ms; a 2016x3024 forward 274.3
/// against 285.9 ms); the H200 agreed at 31104 (4%).
pub const LONG_SEGMENT: usize = 16384;
/// See [`LONG_SEGMENT`] (0 is the heuristics' first; the last when fewer are offered).
pub const LONG_SEGMENT_CANDIDATE: usize = 1;

// SAFETY: the handle is used only under the tower's lock (one forward at a time) or, for the plan
// cache, under its own mutex; cuDNN handles may move between threads.
unsafe impl Send for Cudnn {}
unsafe impl Sync for Cudnn {}

impl Drop for Cudnn {
    fn drop(&mut self) {
        // Packs and plans first: they reference the handle.
        if let Some(p) = &self.packs {
            p.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // SAFETY: created by cudnnCreate, destroyed once.
        unsafe { dnn::cudnnDestroy(self.handle) };
    }
}

impl Cudnn {
    /// A handle bound to `stream` (a `CUstream`), or an error naming what failed.
    pub fn open(stream: Arc<CudaStream>) -> Result<Self, GpuError> {
        if !available() {
            return Err(GpuError::MissingLibrary {
                library: "cuDNN (libcudnn)",
            });
        }
        let mut handle: dnn::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: out-pointer valid; the stream outlives the handle (both owned by the tower).
        unsafe {
            check("cudnnCreate", dnn::cudnnCreate(&mut handle))?;
            if let Err(e) = check(
                "cudnnSetStream",
                dnn::cudnnSetStream(handle, stream.cu_stream() as dnn::cudaStream_t),
            ) {
                dnn::cudnnDestroy(handle);
                return Err(e);
            }
        }
        // SAFETY: a plain query.
        let version = unsafe { dnn::cudnnGetVersion() };
        Ok(Self {
            handle,
            stream,
            plans: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            tune: std::sync::atomic::AtomicBool::new(true),
            follow_single: std::sync::atomic::AtomicBool::new(false),
            candidate: Mutex::new(None),
            packs: (std::env::var("GLM5V_CUDNN_PACKS").as_deref() != Ok("0"))
                .then(|| Mutex::new(HashMap::new())),
            version,
        })
    }

    /// Turns the timing of candidate engines on or off for plans built from now on.
    pub fn set_tune(&self, on: bool) {
        self.tune.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The batch-invariant mode for plans built from now on: no timed choice, and a batch of
    /// segments runs the engine and knobs planned for one segment of that length.
    pub fn set_batch_invariant(&self, on: bool) {
        self.set_tune(!on);
        self.follow_single
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Large calls (those timed in the fast mode) take the heuristics' candidate `n` untimed
    /// (the last when fewer are offered); `None`: the default choice.
    pub fn set_candidate(&self, n: Option<usize>) {
        *self.candidate.lock().unwrap_or_else(|e| e.into_inner()) = n;
    }

    fn note(&self, line: String) {
        if std::env::var("GLM5V_CUDNN_LOG").as_deref() == Ok("1") {
            eprintln!("glm5v: cuDNN plan: {line}");
        }
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    fn plan(&self, s: SdpaShape) -> Result<Arc<Plan>, GpuError> {
        // batch-invariant: a batch runs its single segment's choice (planned first, unlocked)
        let single = (s.batch > 1
            && self
                .follow_single
                .load(std::sync::atomic::Ordering::Relaxed))
        .then(|| self.plan(SdpaShape { batch: 1, ..s }))
        .transpose()?;
        let mut cache = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(&s) {
            return Ok(p.clone());
        }
        let t0 = std::time::Instant::now();
        if let Some(one) = single {
            let choice = one.choice.as_ref().ok_or_else(|| GpuError::Cudnn {
                op: "engine configuration".into(),
                message: format!(
                    "cuDNN did not report the engine planned for one segment of {} tokens",
                    s.len
                ),
            })?;
            let keep = Arc::new(self.op_graph(s)?);
            let (cfg, built) = knobs::build(&keep[6], choice)?;
            let p = Arc::new(self.finalize_plan(cfg, keep, built)?);
            self.note(format!(
                "{} x {} tokens x {} heads ({}): {}, the single segment's, planned in {:.2} s",
                s.batch,
                s.len,
                s.heads,
                if s.half { "half" } else { "bf16" },
                p.describe(),
                t0.elapsed().as_secs_f64()
            ));
            cache.insert(s, p.clone());
            return Ok(p);
        }
        let flop = 4.0 * (s.batch * s.heads * s.head_dim) as f64 * (s.len as f64).powi(2);
        // Finalizing a plan can compile its kernel (cuDNN builds some engines at run time):
        // every candidate only when they are to be timed, else the first that finalizes.
        let to_time = flop >= TUNE_MIN_FLOP
            && self.tune.load(std::sync::atomic::Ordering::Relaxed)
            && std::env::var("GLM5V_CUDNN_TUNE").as_deref() != Ok("0");
        // GLM5V_CUDNN_CANDIDATE=N: the heuristics' candidate N (0 first) for the large calls
        // that would be timed, untimed (an experiment's switch; the last when fewer)
        let fixed = (flop >= TUNE_MIN_FLOP)
            .then(|| *self.candidate.lock().unwrap_or_else(|e| e.into_inner()))
            .flatten()
            .or_else(|| {
                // untimed (the batch-invariant mode): a long segment's fixed choice
                let untimed = !self.tune.load(std::sync::atomic::Ordering::Relaxed);
                (untimed && s.len >= LONG_SEGMENT).then_some(LONG_SEGMENT_CANDIDATE)
            });
        let to_time = to_time && fixed.is_none();
        let all = to_time
            || fixed.is_some()
            || std::env::var("GLM5V_CUDNN_FINALIZE_ALL").as_deref() == Ok("1");
        let (mut cands, offered) = self.candidates(s, all)?;
        let finalized = cands.len();
        let tune = to_time && cands.len() > 1;
        let mut note = String::new();
        let (pick, times) = if tune {
            // A failed timing (say, no memory for the scratch buffers) costs only the choice.
            match self.time_candidates(s, &cands) {
                Ok(times) => {
                    let best = (0..times.len())
                        .min_by(|&a, &b| times[a].total_cmp(&times[b]))
                        .unwrap_or(0);
                    (best, times)
                }
                Err(e) => {
                    note = format!(", not timed: {e}");
                    (0, Vec::new())
                }
            }
        } else {
            (fixed.map_or(0, |n| n.min(cands.len() - 1)), Vec::new())
        };
        let others: Vec<String> = cands
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != pick)
            .map(|(i, c)| format!("{i}: {}", c.describe()))
            .collect();
        let p = Arc::new(cands.swap_remove(pick));
        let timed: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
        self.note(format!(
            "{} x {} tokens x {} heads ({}): {} (candidate {pick}{}{note}; {finalized} of {offered} offered finalized{}), planned in {:.2} s",
            s.batch,
            s.len,
            s.heads,
            if s.half { "half" } else { "bf16" },
            p.describe(),
            if timed.is_empty() {
                String::new()
            } else {
                format!(" of ms [{}]", timed.join(", "))
            },
            if others.is_empty() {
                String::new()
            } else {
                format!("; the others: {}", others.join("; "))
            },
            t0.elapsed().as_secs_f64()
        ));
        cache.insert(s, p.clone());
        Ok(p)
    }

    /// What was planned so far (for reports).
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Median-free quick timing: one warm-up and two timed runs of each candidate on zeroed
    /// scratch buffers of the shape (the kernels' speed does not depend on the values).
    fn time_candidates(&self, s: SdpaShape, cands: &[Plan]) -> Result<Vec<f64>, GpuError> {
        let cuda = |op: &str| {
            let op = op.to_string();
            move |e: cudarc::driver::DriverError| GpuError::cuda(op, e)
        };
        let elems = s.n * s.heads * s.head_dim;
        let mut bufs = Vec::new();
        for _ in 0..4 {
            bufs.push(
                self.stream
                    .alloc_zeros::<u16>(elems.max(1))
                    .map_err(cuda("cuDNN tuning buffer"))?,
            );
        }
        let ws_bytes = cands.iter().map(|p| p.workspace).max().unwrap_or(0);
        let ws = self
            .stream
            .alloc_zeros::<u8>(ws_bytes.max(16))
            .map_err(cuda("cuDNN tuning workspace"))?;
        use cudarc::driver::DevicePtr;
        let ptr = |b: &cudarc::driver::CudaSlice<u16>| b.device_ptr(&self.stream).0;
        let (q, k, v, o) = (ptr(&bufs[0]), ptr(&bufs[1]), ptr(&bufs[2]), ptr(&bufs[3]));
        let w = ws.device_ptr(&self.stream).0;
        let ctx = self.stream.context();
        let mut times = Vec::with_capacity(cands.len());
        for p in cands {
            self.execute(p, s, q, k, v, o, w)?;
            // (cudarc's default event flags disable timing)
            let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            let e0 = ctx.new_event(flags).map_err(cuda("cuEventCreate"))?;
            let e1 = ctx.new_event(flags).map_err(cuda("cuEventCreate"))?;
            e0.record(&self.stream).map_err(cuda("cuEventRecord"))?;
            for _ in 0..2 {
                self.execute(p, s, q, k, v, o, w)?;
            }
            e1.record(&self.stream).map_err(cuda("cuEventRecord"))?;
            let ms = e0.elapsed_ms(&e1).map_err(cuda("cuEventElapsedTime"))?;
            times.push(ms as f64 / 2.0);
        }
        self.stream
            .synchronize()
            .map_err(cuda("cuDNN tuning (synchronize)"))?;
        Ok(times)
    }

    /// The operation graph of `s`: q, k, v, o, the scale, the SDPA operation and the graph
    /// (index 6), finalized.
    fn op_graph(&self, s: SdpaShape) -> Result<Vec<Desc>, GpuError> {
        let (b, l, n, h, d) = (
            s.batch as i64,
            s.len as i64,
            s.n as i64,
            s.heads as i64,
            s.head_dim as i64,
        );
        let ty = if s.half {
            dnn::cudnnDataType_t::CUDNN_DATA_HALF
        } else {
            dnn::cudnnDataType_t::CUDNN_DATA_BFLOAT16
        };
        // q, k, v: [heads, n, hd] with the run's segments consecutive along n.
        let qkv_strides = [l * d, n * d, d, 1];
        // o: [n, heads * hd].
        let o_strides = [l * h * d, d, h * d, 1];
        let dims = [b, h, l, d];
        let q = tensor(UID_Q, dims, qkv_strides, ty, false)?;
        let k = tensor(UID_K, dims, qkv_strides, ty, false)?;
        let v = tensor(UID_V, dims, qkv_strides, ty, false)?;
        // The output has the inputs' type: a bf16 output with half inputs builds a plan on cuDNN
        // 9 but writes wrong values (measured on the H200: relative L2 1.27 on a 72x72 image).
        let o = tensor(UID_O, dims, o_strides, ty, false)?;
        let scale = tensor(
            UID_SCALE,
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            dnn::cudnnDataType_t::CUDNN_DATA_FLOAT,
            true,
        )?;
        let op = Desc::new(D::CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR)?;
        op.set_desc(A::CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, &q)?;
        op.set_desc(A::CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, &k)?;
        op.set_desc(A::CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, &v)?;
        op.set_desc(A::CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, &o)?;
        op.set_desc(A::CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, &scale)?;
        op.finalize("SDPA_FWD operation")?;
        let graph = Desc::new(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, self.handle)?;
        graph.set_desc(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &op)?;
        graph.finalize("operation graph")?;
        Ok(vec![q, k, v, o, scale, op, graph])
    }

    /// An execution plan of the engine configuration `cfg` (of the graph in `keep`).
    fn finalize_plan(
        &self,
        cfg: Desc,
        keep: Arc<Vec<Desc>>,
        built: Vec<Desc>,
    ) -> Result<Plan, GpuError> {
        let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, self.handle)?;
        plan.set_desc(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &cfg)?;
        plan.finalize("execution plan")?;
        let mut ws: i64 = 0;
        // SAFETY: one i64.
        unsafe {
            plan.get(
                A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                T::CUDNN_TYPE_INT64,
                &mut ws,
            )?
        };
        let choice = knobs::read(&cfg).ok();
        Ok(Plan {
            plan,
            _cfg: cfg,
            _keep: keep,
            _built: built,
            workspace: ws.max(0) as usize,
            choice,
        })
    }

    /// The execution plans cuDNN's heuristics offer for `s` that finalize, best guess first:
    /// all of them with `all`, else the first; and how many were offered.
    fn candidates(&self, s: SdpaShape, all: bool) -> Result<(Vec<Plan>, usize), GpuError> {
        let mut keep = self.op_graph(s)?;
        let heur = Desc::new(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        heur.set_desc(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &keep[6])?;
        let mode = dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A;
        // SAFETY: one heuristics mode.
        unsafe {
            heur.set_value(
                A::CUDNN_ATTR_ENGINEHEUR_MODE,
                T::CUDNN_TYPE_HEUR_MODE,
                &mode,
            )?
        };
        heur.finalize("engine heuristics")?;
        const MAX_CFGS: usize = 8;
        let cfgs = heur.get_descs(
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
            MAX_CFGS,
        )?;
        let offered = cfgs.len();
        let mut last = GpuError::Cudnn {
            op: "engine heuristics".into(),
            message: format!("no engine configuration offered for {s:?}"),
        };
        keep.push(heur);
        let keep = Arc::new(keep);
        let mut plans = Vec::new();
        for cfg in cfgs {
            match self.finalize_plan(cfg, keep.clone(), Vec::new()) {
                Ok(p) => plans.push(p),
                Err(e) => {
                    last = e;
                    continue;
                }
            }
            if !all {
                break;
            }
        }
        if plans.is_empty() {
            Err(last)
        } else {
            Ok((plans, offered))
        }
    }

    /// Builds (or finds) the plan for `s` and returns its workspace bytes; the error says why
    /// there is none. The engine chosen is in [`Cudnn::log`].
    pub fn prepare(&self, s: SdpaShape) -> Result<usize, GpuError> {
        Ok(self.plan(s)?.workspace)
    }

    /// Runs the attention of shape `s`: `q`, `k`, `v`, `o` are device addresses of the run's
    /// first element (see the module doc for the layouts); `workspace` holds at least the plan's
    /// workspace bytes (see [`Cudnn::prepare`]).
    pub fn run(
        &self,
        s: SdpaShape,
        q: u64,
        k: u64,
        v: u64,
        o: u64,
        workspace: u64,
    ) -> Result<(), GpuError> {
        let p = self.plan(s)?;
        self.execute(&p, s, q, k, v, o, workspace)
    }

    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        p: &Plan,
        s: SdpaShape,
        q: u64,
        k: u64,
        v: u64,
        o: u64,
        workspace: u64,
    ) -> Result<(), GpuError> {
        let ptrs = [q, k, v, o, workspace];
        let exec = |pack: &Desc| {
            // SAFETY: a finalized plan and variant pack whose device pointers cover the shapes
            // the plan was built for (the caller's contract).
            check("cudnnBackendExecute", unsafe {
                dnn::cudnnBackendExecute(self.handle, p.plan.0, pack.0)
            })
        };
        let Some(packs) = &self.packs else {
            return exec(&Self::pack(s, ptrs)?.desc);
        };
        let mut packs = packs.lock().unwrap_or_else(|e| e.into_inner());
        let key = (s, ptrs);
        if !packs.contains_key(&key) {
            if packs.len() >= MAX_PACKS {
                packs.clear();
            }
            packs.insert(key, Self::pack(s, ptrs)?);
        }
        exec(&packs[&key].desc)
    }

    /// A variant pack binding q, k, v, o (device addresses), the scale and the workspace.
    fn pack(s: SdpaShape, [q, k, v, o, workspace]: [u64; 5]) -> Result<Pack, GpuError> {
        let scale = Box::new((s.head_dim as f32).powf(-0.5));
        let uids = [UID_Q, UID_K, UID_V, UID_O, UID_SCALE];
        let ptrs: [*mut c_void; 5] = [
            q as *mut c_void,
            k as *mut c_void,
            v as *mut c_void,
            o as *mut c_void,
            (&*scale as *const f32).cast_mut().cast(),
        ];
        let pack = Desc::new(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.set_i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &uids)?;
        let wsp = workspace as *mut c_void;
        // SAFETY: 5 pointers and one workspace pointer, copied by cuDNN; the scale is boxed
        // with the pack, so it lives as long as the pack does.
        unsafe {
            pack.set(
                A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                T::CUDNN_TYPE_VOID_PTR,
                5,
                ptrs.as_ptr().cast(),
            )?;
            pack.set_value(
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                T::CUDNN_TYPE_VOID_PTR,
                &wsp,
            )?;
        }
        pack.finalize("variant pack")?;
        Ok(Pack {
            desc: pack,
            _scale: scale,
        })
    }
}
