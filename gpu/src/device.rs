//! The device: detection without panics, one context + stream + cuBLAS handle, the NVRTC-compiled
//! kernels (cached per process), raw device buffers, launches and GEMMs.

use crate::error::GpuError;
use crate::lt::{GemmKey, LtGemm};
use cudarc::cublas::{CudaBlas, sys as blas_sys};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The kernel sources, compiled at run time with NVRTC.
pub const COMMON_CUH: &str = include_str!("../kernels/common.cuh");
pub const TOWER_CU: &str = include_str!("../kernels/tower.cu");
pub const ATTENTION_CU: &str = include_str!("../kernels/attention.cu");

/// Kernel entry points of the module.
const KERNELS: [&str; 13] = [
    "rms_norm",
    "add_bias",
    "bias_residual",
    "bias_residual_rms",
    "bias_residual_rms_1024",
    "cast_act",
    "half_to_bf16",
    "bf16_to_half",
    "half_to_bf16_inplace",
    "swiglu",
    "layer_norm_gelu",
    "qk_norm_rope",
    "attention",
];

/// Default shortest segment for cuDNN's attention (GLM5V_GPU_CUDNN_MIN_LEN overrides).
pub const CUDNN_MIN_LEN: usize = 1024;

/// What [`device_available`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor): (9, 0) on an H200.
    pub compute_capability: (i32, i32),
    pub total_bytes: usize,
    pub free_bytes: usize,
    /// Devices the driver reports.
    pub device_count: usize,
}

/// Whether the CUDA libraries this crate loads are present (no panic when they are not: cudarc
/// with dynamic loading panics on first use of a missing library).
pub fn check_libraries() -> Result<(), GpuError> {
    // SAFETY: these only try to dlopen the libraries.
    unsafe {
        if !cudarc::driver::sys::is_culib_present() {
            return Err(GpuError::NoDevice {
                reason: "the CUDA driver library (libcuda) is not installed".into(),
            });
        }
        if !cudarc::nvrtc::sys::is_culib_present() {
            return Err(GpuError::MissingLibrary {
                library: "NVRTC (libnvrtc)",
            });
        }
        if !cudarc::cublas::sys::is_culib_present() {
            return Err(GpuError::MissingLibrary {
                library: "cuBLAS (libcublas)",
            });
        }
    }
    Ok(())
}

/// Whether NVRTC alone is present (enough to compile the kernels, no device needed).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Finds device 0 and describes it; a typed error (never a panic) when there is none.
pub fn device_available() -> Result<DeviceInfo, GpuError> {
    device_info(0)
}

/// Finds device `ordinal` (as CUDA numbers the visible devices) and describes it; a typed
/// error naming the count when there is no such device.
pub fn device_info(ordinal: usize) -> Result<DeviceInfo, GpuError> {
    check_libraries()?;
    let count = CudaContext::device_count().map_err(|e| GpuError::NoDevice {
        reason: format!("the driver reports {e:?}"),
    })?;
    if count < 1 {
        return Err(GpuError::NoDevice {
            reason: "the driver reports 0 devices".into(),
        });
    }
    if ordinal >= count as usize {
        return Err(GpuError::NoDevice {
            reason: format!(
                "device {ordinal} asked for, the driver reports {count} (0..{})",
                count - 1
            ),
        });
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| GpuError::NoDevice {
        reason: format!("cannot open device {ordinal}: {e:?}"),
    })?;
    info_of(&ctx, count as usize)
}

fn info_of(ctx: &Arc<CudaContext>, count: usize) -> Result<DeviceInfo, GpuError> {
    let name = ctx
        .name()
        .map_err(|e| GpuError::cuda("cuDeviceGetName", e))?;
    let cc = ctx
        .compute_capability()
        .map_err(|e| GpuError::cuda("compute capability", e))?;
    let (free, total) = ctx
        .mem_get_info()
        .map_err(|e| GpuError::cuda("cuMemGetInfo", e))?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name,
        compute_capability: cc,
        total_bytes: total,
        free_bytes: free,
        device_count: count,
    })
}

/// The NVRTC target for a compute capability (PTX for `compute_XY`).
pub fn arch_for(cc: (i32, i32)) -> &'static str {
    match cc {
        (9, 0) => "compute_90",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        (major, minor) => Box::leak(format!("compute_{major}{minor}").into_boxed_str()),
    }
}

/// The full source of the kernel module for one activation type and head dim.
pub fn kernel_source(bf16: bool, head_dim: usize) -> String {
    format!(
        "#define ACT_BF16 {}\n#define HD {}\n{COMMON_CUH}\n{TOWER_CU}\n{ATTENTION_CU}\n",
        bf16 as i32, head_dim
    )
}

/// Compiles the kernel module to PTX (cached per process by (bf16, head_dim, arch)).
pub fn compile_kernels(
    bf16: bool,
    head_dim: usize,
    arch: &'static str,
) -> Result<String, GpuError> {
    type PtxCache = Mutex<HashMap<(bool, usize, &'static str), String>>;
    static CACHE: OnceLock<PtxCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (bf16, head_dim, arch);
    if let Some(ptx) = cache.lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(ptx.clone());
    }
    if !nvrtc_available() {
        return Err(GpuError::MissingLibrary {
            library: "NVRTC (libnvrtc)",
        });
    }
    let opts = CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    let ptx =
        cudarc::nvrtc::compile_ptx_with_opts(kernel_source(bf16, head_dim), opts).map_err(|e| {
            let log = match &e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                    log.to_string_lossy().into_owned()
                }
                other => format!("{other:?}"),
            };
            GpuError::Compile {
                arch: arch.to_string(),
                log,
            }
        })?;
    let text = ptx.to_src();
    cache
        .lock()
        .map_err(|_| poisoned())?
        .insert(key, text.clone());
    Ok(text)
}

fn poisoned() -> GpuError {
    GpuError::Cuda {
        op: "kernel cache".into(),
        message: "a thread panicked while holding the cache lock".into(),
    }
}

/// One kernel argument: a device pointer (0 = null), an i32, an i64 or an f32.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    P(u64),
    I(i32),
    L(i64),
    F(f32),
}

/// Converts a scalar or pointer to a kernel [`Arg`].
pub trait IntoArg {
    fn into_arg(self) -> Arg;
}
impl IntoArg for u64 {
    fn into_arg(self) -> Arg {
        Arg::P(self)
    }
}
impl IntoArg for i32 {
    fn into_arg(self) -> Arg {
        Arg::I(self)
    }
}
impl IntoArg for i64 {
    fn into_arg(self) -> Arg {
        Arg::L(self)
    }
}
impl IntoArg for f32 {
    fn into_arg(self) -> Arg {
        Arg::F(self)
    }
}
/// A kernel argument from a `u64` pointer, `i32`, `i64` or `f32`.
pub fn arg(v: impl IntoArg) -> Arg {
    v.into_arg()
}

/// Element type of a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dt {
    F32,
    Bf16,
    /// IEEE half.
    F16,
    I32,
}

impl Dt {
    pub fn size(self) -> usize {
        match self {
            Dt::F32 | Dt::I32 => 4,
            Dt::Bf16 | Dt::F16 => 2,
        }
    }
}

/// 2-byte values (little-endian) widened to f32 by `to`.
fn halves(bytes: &[u8], to: fn([u8; 2]) -> f32) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| to([b[0], b[1]])).collect()
}

/// A raw device buffer (freed on drop).
pub struct DBuf {
    _mem: CudaSlice<u8>,
    pub ptr: u64,
    pub len: usize,
    pub dt: Dt,
}

/// The opened device with its compiled kernels.
pub struct Dev {
    /// cuDNN's fused attention, when loaded (declared first: dropped before the context).
    pub cudnn: Option<crate::cudnn::Cudnn>,
    /// Why cuDNN is not in use (`None` when it is).
    pub cudnn_note: Option<String>,
    /// Shortest segment sent to cuDNN (shorter ones run better on our kernels); 1 when forced.
    pub cudnn_min_len: usize,
    /// GLM5V_GPU_ATTENTION=cudnn: every attention through cuDNN, failures are errors.
    pub cudnn_forced: bool,
    /// Consecutive equal segments go to cuDNN as one batch in the batch-invariant mode too
    /// (with the single segment's engine and knobs); `GLM5V_CUDNN_BATCHED=0`: one call a
    /// segment.
    pub cudnn_batched: bool,
    /// Runs of equal segments are cut into runs of powers of two (a plan per batch size, so
    /// at most 7 plans a segment length for up to 127 segments); `GLM5V_CUDNN_POW2=0`: uncut.
    pub cudnn_pow2: bool,
    /// Each image's rows are the same bits alone or packed with any others (the default;
    /// GLM5V_GPU_BATCH_INVARIANT=0 turns it off): GEMMs through [`LtGemm`]'s one algorithm
    /// per weight, every attention segment through one engine (cuDNN for all of them when it
    /// loads, untimed, one call per segment; else one fixed kernel), see docs/GPU.md.
    pub batch_invariant: bool,
    /// The batch-invariant GEMMs (present exactly when `batch_invariant`).
    pub lt: Option<LtGemm>,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    pub info: DeviceInfo,
    pub bf16: bool,
    pub head_dim: usize,
    funcs: HashMap<&'static str, CudaFunction>,
    /// Streaming multiprocessors of the device.
    pub sm_count: usize,
}

impl Dev {
    /// Opens device `ordinal` and compiles the kernels for activations in bf16 (`bf16`) or f32.
    pub fn open(ordinal: usize, bf16: bool, head_dim: usize) -> Result<Self, GpuError> {
        let info = device_info(ordinal)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| GpuError::NoDevice {
            reason: format!("cannot open device {ordinal}: {e:?}"),
        })?;
        // One stream only: the per-buffer events of cudarc's multi-stream tracking are not needed.
        // SAFETY: no buffer exists yet and every launch goes to `stream`.
        unsafe { ctx.disable_event_tracking() };
        // A stream of our own, not the legacy default one: CUDA graphs are captured from it.
        let stream = ctx
            .new_stream()
            .map_err(|e| GpuError::cuda("cuStreamCreate", e))?;
        // Keep freed activation memory in the stream-ordered pool between forwards (allocations
        // inside a forward then cost no driver call). Best effort: a failure only costs speed.
        if ctx.has_async_alloc() {
            use cudarc::driver::sys;
            let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
            let mut threshold: u64 = u64::MAX;
            // SAFETY: valid device handle and out-pointers that live across the calls.
            unsafe {
                if sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
                    == sys::cudaError_enum::CUDA_SUCCESS
                {
                    let _ = sys::cuMemPoolSetAttribute(
                        pool,
                        sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                        &mut threshold as *mut u64 as *mut _,
                    );
                }
            }
        }
        let blas = CudaBlas::new(stream.clone()).map_err(|e| GpuError::blas("cublasCreate", e))?;
        let math = if bf16 {
            blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        } else {
            blas_sys::cublasMath_t::CUBLAS_PEDANTIC_MATH
        };
        // SAFETY: a valid handle.
        unsafe { blas_sys::cublasSetMathMode(*blas.handle(), math) }
            .result()
            .map_err(|e| GpuError::blas("cublasSetMathMode", e))?;
        let arch = arch_for(info.compute_capability);
        let ptx = compile_kernels(bf16, head_dim, arch)?;
        let module = ctx
            .load_module(Ptx::from_src(ptx))
            .map_err(|e| GpuError::cuda("cuModuleLoadData", e))?;
        let mut funcs = HashMap::new();
        for name in KERNELS {
            funcs.insert(
                name,
                module
                    .load_function(name)
                    .map_err(|e| GpuError::cuda(format!("load kernel {name}"), e))?,
            );
        }
        // The tensor-core attention exists only in the bf16, head_dim 64 build.
        // GLM5V_GPU_ATTENTION: scalar (the f32 FMA kernel only), mma (8 warps x 16 queries),
        // mma_w4 (4 warps x 32 queries), anything else: both, chosen per launch (see
        // `Dev::attention_kernel`).
        let choice = std::env::var("GLM5V_GPU_ATTENTION").unwrap_or_default();
        if bf16 && head_dim == 64 {
            for name in [
                "attention_mma",
                "attention_mma_w4",
                "attention_mma_f16",
                "attention_mma_w4_f16",
            ] {
                let wanted = match choice.as_str() {
                    "scalar" => false,
                    "mma" => name.starts_with("attention_mma") && !name.contains("_w4"),
                    "mma_w4" => name.starts_with("attention_mma_w4"),
                    _ => true,
                };
                if wanted {
                    let f = module
                        .load_function(name)
                        .map_err(|e| GpuError::cuda(format!("load kernel {name}"), e))?;
                    funcs.insert(name, f);
                }
            }
        }
        let sm_count = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| GpuError::cuda("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", e))?
            .max(1) as usize;
        // cuDNN's fused attention: bf16 build and head dims it takes. GLM5V_GPU_ATTENTION=cudnn
        // forces it (an error when it cannot load); scalar|mma|mma_w4 leave it out.
        let cudnn_forced = choice == "cudnn";
        let (cudnn, cudnn_note) = if !bf16 || !head_dim.is_multiple_of(8) || head_dim > 128 {
            (
                None,
                Some(format!(
                    "not used for this build (bf16 {bf16}, head_dim {head_dim})"
                )),
            )
        } else if matches!(choice.as_str(), "scalar" | "mma" | "mma_w4") {
            (
                None,
                Some(format!("not used: GLM5V_GPU_ATTENTION={choice}")),
            )
        } else {
            match crate::cudnn::Cudnn::open(stream.clone()) {
                Ok(c) => (Some(c), None),
                Err(e) if cudnn_forced => return Err(e),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        let batch_invariant = std::env::var("GLM5V_GPU_BATCH_INVARIANT").as_deref() != Ok("0");
        let lt = if batch_invariant {
            Some(LtGemm::open()?)
        } else {
            None
        };
        if let Some(c) = &cudnn {
            // a timed choice of engine could differ from process to process; a batch of equal
            // segments runs the single segment's engine and knobs
            c.set_batch_invariant(batch_invariant);
        }
        let cudnn_batched = crate::env::usize_var("GLM5V_CUDNN_BATCHED", 1, 0)? != 0;
        let cudnn_pow2 = crate::env::usize_var("GLM5V_CUDNN_POW2", 1, 0)? != 0;
        let candidate = crate::env::usize_var("GLM5V_CUDNN_CANDIDATE", usize::MAX, 0)?;
        if let Some(c) = &cudnn {
            c.set_candidate((candidate != usize::MAX).then_some(candidate));
        }
        // The path of each segment follows from its length alone (the batch-invariant mode
        // included): cuDNN from this many tokens, our kernels below, which also spares a plan
        // (and its build time) for every short length.
        let cudnn_min_len = if cudnn_forced {
            1
        } else {
            crate::env::usize_var("GLM5V_GPU_CUDNN_MIN_LEN", CUDNN_MIN_LEN, 1)?
        };
        Ok(Self {
            cudnn,
            cudnn_note,
            cudnn_min_len,
            cudnn_forced,
            cudnn_batched,
            cudnn_pow2,
            batch_invariant,
            lt,
            ctx,
            stream,
            blas,
            info,
            bf16,
            head_dim,
            funcs,
            sm_count,
        })
    }

    /// The activation dtype fed to GEMMs.
    pub fn act(&self) -> Dt {
        if self.bf16 { Dt::Bf16 } else { Dt::F32 }
    }

    /// Allocates `len` elements of `dt` (uninitialised); OOM names `what` and the size.
    pub fn alloc(&self, what: &str, len: usize, dt: Dt) -> Result<DBuf, GpuError> {
        let bytes = (len * dt.size()).max(256);
        // SAFETY: every buffer is written by a kernel, a GEMM or a copy before it is read.
        let mem = unsafe { self.stream.alloc::<u8>(bytes) }
            .map_err(|e| self.alloc_error(what, bytes, e))?;
        let ptr = {
            let (ptr, _guard) = mem.device_ptr(&self.stream);
            ptr
        };
        Ok(DBuf {
            ptr,
            _mem: mem,
            len,
            dt,
        })
    }

    fn alloc_error(&self, what: &str, bytes: usize, e: cudarc::driver::DriverError) -> GpuError {
        use cudarc::driver::sys::cudaError_enum as E;
        if e.0 == E::CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = self.ctx.mem_get_info().unwrap_or((0, 0));
            const MIB: f64 = 1024.0 * 1024.0;
            GpuError::OutOfMemory {
                what: what.to_string(),
                bytes,
                mib: bytes as f64 / MIB,
                free_mib: free as f64 / MIB,
                total_mib: total as f64 / MIB,
            }
        } else {
            GpuError::cuda(format!("allocating {bytes} bytes for {what}"), e)
        }
    }

    /// Uploads f32 values as `dt` (F32, or Bf16 / F16 rounded to nearest even).
    pub fn upload_f32(&self, what: &str, data: &[f32], dt: Dt) -> Result<DBuf, GpuError> {
        let buf = self.alloc(what, data.len(), dt)?;
        let bits = |to: fn(f32) -> u16| -> Vec<u16> { data.iter().map(|&x| to(x)).collect() };
        match dt {
            Dt::F32 => self.htod(bytemuck::cast_slice(data), &buf)?,
            Dt::Bf16 => self.htod(
                bytemuck::cast_slice(&bits(|x| half::bf16::from_f32(x).to_bits())),
                &buf,
            )?,
            Dt::F16 => self.htod(
                bytemuck::cast_slice(&bits(|x| half::f16::from_f32(x).to_bits())),
                &buf,
            )?,
            Dt::I32 => return Err(GpuError::Unsupported("f32 data uploaded as i32".into())),
        }
        Ok(buf)
    }

    /// Copies f32 values into an existing f32 buffer of at least that length.
    pub fn upload_into(&self, dst: &DBuf, data: &[f32]) -> Result<(), GpuError> {
        assert!(
            dst.dt == Dt::F32 && dst.len >= data.len(),
            "upload_into: buffer too small or not f32"
        );
        self.htod(bytemuck::cast_slice(data), dst)
    }

    pub fn upload_i32(&self, what: &str, data: &[i32]) -> Result<DBuf, GpuError> {
        let buf = self.alloc(what, data.len(), Dt::I32)?;
        self.htod(bytemuck::cast_slice(data), &buf)?;
        Ok(buf)
    }

    /// Copies `src` into `dst` in the tower's stream order without waiting for it (nor for
    /// the work queued before it).
    ///
    /// # Safety
    /// `src` is page-locked host memory that is neither written nor freed until the stream
    /// has passed this copy; `dst` holds at least `src.len()` bytes.
    pub unsafe fn htod_staged(&self, src: &[u8], dst: &DBuf) -> Result<(), GpuError> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: per the caller's contract (from page-locked memory the copy is asynchronous:
        // no stream sync before it, unlike a pageable source).
        unsafe {
            cudarc::driver::result::memcpy_htod_async(dst.ptr, src, self.stream.cu_stream())
                .map_err(|e| GpuError::cuda("cuMemcpyHtoDAsync (staged)", e))
        }
    }

    fn htod(&self, bytes: &[u8], dst: &DBuf) -> Result<(), GpuError> {
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: dst holds at least bytes.len() bytes (allocated for this data); the host slice
        // outlives the synchronous copy below.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(dst.ptr, bytes, self.stream.cu_stream())
                .map_err(|e| GpuError::cuda("cuMemcpyHtoDAsync", e))?;
        }
        self.sync("upload")
    }

    /// Copies `count` elements from element `offset` of `src` to the host as f32.
    pub fn download_f32(
        &self,
        src: &DBuf,
        offset: usize,
        count: usize,
    ) -> Result<Vec<f32>, GpuError> {
        self.download_as(src, src.dt, offset, count)
    }

    /// [`Dev::download_f32`] of a buffer that holds elements of `dt` (a 2-byte activation
    /// buffer written as IEEE half, an f32 GEMM output buffer written as half).
    pub fn download_as(
        &self,
        src: &DBuf,
        dt: Dt,
        offset: usize,
        count: usize,
    ) -> Result<Vec<f32>, GpuError> {
        let size = dt.size();
        assert!(
            (offset + count) * size <= src.len * src.dt.size(),
            "download out of range"
        );
        if dt == Dt::F32 {
            // straight into the f32 array: a byte buffer then a conversion would be a second
            // allocation and copy of the whole output (a 32-image batch's is 134 MB)
            let mut out = vec![0f32; count];
            if count > 0 {
                // SAFETY: as below; `out` holds exactly `count * 4` bytes.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        bytemuck::cast_slice_mut::<f32, u8>(&mut out),
                        src.ptr + (offset * size) as u64,
                        self.stream.cu_stream(),
                    )
                    .map_err(|e| GpuError::cuda("cuMemcpyDtoHAsync", e))?;
                }
                self.sync("download")?;
            }
            return Ok(out);
        }
        let mut bytes = vec![0u8; count * size];
        if count > 0 {
            // SAFETY: the range is inside `src` (asserted), `bytes` is large enough, and the copy
            // completes before `bytes` is read (synchronize).
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(
                    &mut bytes,
                    src.ptr + (offset * size) as u64,
                    self.stream.cu_stream(),
                )
                .map_err(|e| GpuError::cuda("cuMemcpyDtoHAsync", e))?;
            }
            self.sync("download")?;
        }
        Ok(match dt {
            Dt::F32 => unreachable!("copied above"),
            Dt::Bf16 => halves(&bytes, |b| half::bf16::from_le_bytes(b).to_f32()),
            Dt::F16 => halves(&bytes, |b| half::f16::from_le_bytes(b).to_f32()),
            Dt::I32 => bytemuck::pod_collect_to_vec::<u8, i32>(&bytes)
                .into_iter()
                .map(|v| v as f32)
                .collect(),
        })
    }

    /// Copies the first `bytes` of `src` into `dst` on the stream.
    pub fn copy(&self, src: &DBuf, dst: &DBuf, bytes: usize) -> Result<(), GpuError> {
        assert!(
            bytes <= src.len * src.dt.size() && bytes <= dst.len * dst.dt.size(),
            "copy: {bytes} bytes exceed a buffer"
        );
        // SAFETY: both are live device buffers of at least `bytes` (asserted).
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                dst.ptr,
                src.ptr,
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| GpuError::cuda("cuMemcpyDtoDAsync", e))
    }

    /// Makes the device's context current on this thread (raw driver calls that name no
    /// context, from a thread that may not have used this device yet).
    pub fn bind(&self) -> Result<(), GpuError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| GpuError::cuda("cuCtxSetCurrent", e))
    }

    /// Waits for the stream; reports any asynchronous error of earlier launches.
    pub fn sync(&self, op: &str) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .map_err(|e| GpuError::cuda(format!("{op} (stream synchronize)"), e))
    }

    /// Whether kernel `name` was loaded.
    /// The attention kernel and its block size for `blocks` (query tiles x heads) blocks: the
    /// tensor-core kernel with 4 warps of 32 queries (half the shared-memory traffic per MMA)
    /// when the launch fills the device at least four times over, else the one with 8 warps of
    /// 16 queries (twice the warps per query tile: more warps in flight when there are few tiles);
    /// its half-input variant when `f16`; the scalar kernel when no tensor-core kernel is loaded.
    pub fn attention_kernel(&self, blocks: usize, f16: bool) -> (&'static str, u32) {
        // batch-invariant: the same kernel whatever the number of query tiles
        let big = self.batch_invariant || blocks >= 4 * self.sm_count;
        let pick = |name: &'static str, half: &'static str| {
            if f16 && self.has(half) { half } else { name }
        };
        match (self.has("attention_mma"), self.has("attention_mma_w4")) {
            (_, true) if big => (pick("attention_mma_w4", "attention_mma_w4_f16"), 128),
            (true, _) => (pick("attention_mma", "attention_mma_f16"), 256),
            (false, true) => (pick("attention_mma_w4", "attention_mma_w4_f16"), 128),
            (false, false) => ("attention", 64),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    fn func(&self, name: &str) -> &CudaFunction {
        self.funcs
            .get(name)
            .expect("every kernel is loaded at open")
    }

    /// Launches kernel `name`; `args` pushes the arguments in order.
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), GpuError> {
        let f = self.func(name);
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::P(v) => b.arg(v),
                Arg::I(v) => b.arg(v),
                Arg::L(v) => b.arg(v),
                Arg::F(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: argument lists match the kernel signatures in kernels/*.cu (see kernels.rs).
        unsafe { b.launch(cfg) }.map_err(|e| GpuError::cuda(format!("launch {name}"), e))?;
        Ok(())
    }

    /// A grid-stride launch shape for `n` elements.
    pub fn grid_for(&self, n: usize) -> (u32, u32, u32) {
        let blocks = n.div_ceil(256).clamp(1, 132 * 32);
        (blocks as u32, 1, 1)
    }

    /// `y [rows, out] (f32) = x [rows, k] (act) · w [out, k]ᵀ (act)`, f32 accumulation (no TF32 in
    /// f32 mode).
    pub fn linear(
        &self,
        x: &DBuf,
        w: &DBuf,
        y: &DBuf,
        rows: usize,
        k: usize,
        out: usize,
    ) -> Result<(), GpuError> {
        self.linear_to(x, w, y, Dt::F32, rows, k, out)
    }

    /// `y [rows, out] = x [rows, k] · wᵀ` with `w` [out, k]; `x` holds elements of `w.dt` (f32,
    /// bf16 or IEEE half; f32 accumulation, pedantic for f32), `y` is written as `y_dt` (f32, or
    /// IEEE half for half inputs).
    #[allow(clippy::too_many_arguments)]
    pub fn linear_to(
        &self,
        x: &DBuf,
        w: &DBuf,
        y: &DBuf,
        y_dt: Dt,
        rows: usize,
        k: usize,
        out: usize,
    ) -> Result<(), GpuError> {
        let in_bytes = rows * k * w.dt.size();
        debug_assert!(
            x.len * x.dt.size() >= in_bytes
                && w.len >= out * k
                && y.len * y.dt.size() >= rows * out * y_dt.size()
        );
        let (ab_type, compute) = match w.dt {
            Dt::Bf16 => (
                blas_sys::cudaDataType::CUDA_R_16BF,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            Dt::F16 => (
                blas_sys::cudaDataType::CUDA_R_16F,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            Dt::F32 => (
                blas_sys::cudaDataType::CUDA_R_32F,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
            ),
            Dt::I32 => return Err(GpuError::Unsupported("an i32 GEMM weight".into())),
        };
        let c_type = match y_dt {
            Dt::F32 => blas_sys::cudaDataType::CUDA_R_32F,
            Dt::F16 if w.dt == Dt::F16 => blas_sys::cudaDataType::CUDA_R_16F,
            other => {
                return Err(GpuError::Unsupported(format!(
                    "a GEMM of {:?} inputs with {other:?} output",
                    w.dt
                )));
            }
        };
        if let Some(lt) = &self.lt {
            let aligned = [x.ptr, w.ptr, y.ptr].iter().all(|p| p % 16 == 0)
                && (k * w.dt.size()).is_multiple_of(16)
                && (out * y_dt.size()).is_multiple_of(16);
            let key = GemmKey::new(w.dt, y_dt, k, out, aligned);
            // SAFETY: the pointers are live device buffers of the asserted sizes and types.
            return unsafe {
                lt.gemm(
                    key,
                    w.ptr,
                    x.ptr,
                    y.ptr,
                    rows as u64,
                    self.stream.cu_stream() as *mut _,
                )
            };
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dims = |v: usize| {
            i32::try_from(v)
                .map_err(|_| GpuError::Unsupported(format!("GEMM dimension {v} exceeds i32")))
        };
        // Column-major view: C[out, rows] = op(A = w as [k, out])ᵀ · B (x as [k, rows]).
        // SAFETY: the pointers are live device buffers of the asserted sizes.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                dims(out)?,
                dims(rows)?,
                dims(k)?,
                &alpha as *const f32 as *const _,
                w.ptr as *const _,
                ab_type,
                dims(k)?,
                x.ptr as *const _,
                ab_type,
                dims(k)?,
                &beta as *const f32 as *const _,
                y.ptr as *mut _,
                c_type,
                dims(out)?,
                compute,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| GpuError::blas(format!("GEMM [{rows} x {k}] x [{k} x {out}]"), e))
    }

    /// A device event (timing enabled).
    pub fn event(&self) -> Result<cudarc::driver::CudaEvent, GpuError> {
        self.ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| GpuError::cuda("cuEventCreate", e))
    }
}
