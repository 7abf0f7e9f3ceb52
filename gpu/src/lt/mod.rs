//! Batch-invariant GEMMs through cuBLASLt: one reduction order per weight shape, whatever the
//! row count.
//!
//! cuBLAS's default GEMM picks its kernel (tile shape, split-K, stream-K) from all three
//! dimensions, so the rows of one image are reduced in another order when the image is packed
//! with others: on the H200 the same photo alone and packed differed by 5.8e-3 rel L2 in bf16.
//! Here a weight `[out, k]` and its types get a *reference* algorithm, chosen once by cuBLASLt's
//! heuristics at a fixed row count ([`REF_ROWS`]) among algorithms that need no workspace and do
//! not split the reduction (so no stream-K, no split-K partial sums). A tile kernel without split
//! reduction computes each output element from its own row and the weight in a fixed order, so a
//! row's result does not depend on which other rows share the call.
//!
//! The reference's tiles suit its row count; at 64 rows they leave most SMs idle. So each bucket
//! of row counts ([`BUCKET_ROWS`]) takes the heuristics' first algorithm at that count that
//! computes the *same bits* as the reference: every candidate is run once on a probe (random
//! inputs, the real weight, `classes.rs`) beside the reference and taken only when every output
//! element is identical. Algorithms that reduce in the same order (the same k-step and
//! instruction, other tile or cluster shapes) pass; any other order differs in most elements of
//! a random product and is refused. Which algorithm runs then depends on the row count, but the
//! bits of a row do not (`GLM5V_GPU_LT_BUCKETS=0`: the reference for every row count).

use crate::device::Dt;
use crate::error::GpuError;
use cudarc::cublaslt::sys as lt;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// Row count at which each weight's algorithm is chosen, then used for every row count. Measured
/// on the H200 (full geometry, bf16, median of 10 ms; at 8192 / 2048 / 512 / 128 rows):
/// 112x112 3.02 / 2.31 / 1.73 / 1.53, 16x448x448 35.3 / 35.8 / 39.5 / 49.3, 1008x1008
/// 17.5 / 16.9 / 17.7 / 20.9, 2016x3024 280 / 283 / 290 / 308: 2048 is as fast as 8192 from
/// 448x448 up and gives back a quarter of the small image's cost (`GLM5V_GPU_LT_ROWS` sets it).
pub const REF_ROWS: u64 = 2048;

/// Row counts the per-bucket algorithms are chosen at: a GEMM of `r` rows runs the algorithm of
/// the first bucket of at least `r` rows; above the last, the reference. Only small counts: the
/// heuristics' choice at a count is tuned to that count's waves of tiles, and the choices at
/// 16384 rows (128x256 tiles for the [1024 x k] weights) ran a 1008x1008 image's 5184 rows
/// slower than the reference (18.2 against 17.6 ms on the H100: about 165 such tiles on 132
/// SMs).
pub const BUCKET_ROWS: [u64; 3] = [64, 256, 1024];

/// Algorithms cuBLASLt's heuristics are asked for per weight and row count.
const CANDIDATES: usize = 16;

mod classes;

/// Element types and shape of one weight's GEMM (the algorithm's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmKey {
    pub ab: lt::cudaDataType,
    pub c: lt::cudaDataType,
    pub compute: lt::cublasComputeType_t,
    pub k: u64,
    pub out: u64,
    /// Every pointer 16-byte aligned (else an algorithm chosen for 4-byte alignment).
    pub aligned: bool,
}

impl GemmKey {
    /// The key of a GEMM with weights (and inputs) of `w`, output `y` (f32, or IEEE half for
    /// half inputs: [`crate::device::Dev::linear_to`] checks the pair before).
    pub fn new(w: Dt, y: Dt, k: usize, out: usize, aligned: bool) -> Self {
        let (ab, compute) = match w {
            Dt::Bf16 => (
                lt::cudaDataType::CUDA_R_16BF,
                lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            Dt::F16 => (
                lt::cudaDataType::CUDA_R_16F,
                lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            Dt::F32 | Dt::I32 => (
                lt::cudaDataType::CUDA_R_32F,
                lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
            ),
        };
        let c = if y == Dt::F16 {
            lt::cudaDataType::CUDA_R_16F
        } else {
            lt::cudaDataType::CUDA_R_32F
        };
        Self {
            ab,
            c,
            compute,
            k: k as u64,
            out: out as u64,
            aligned,
        }
    }
}

/// A cuBLASLt handle and the algorithm chosen per [`GemmKey`].
pub struct LtGemm {
    handle: lt::cublasLtHandle_t,
    /// Rows the reference algorithms are chosen at ([`REF_ROWS`], or `GLM5V_GPU_LT_ROWS`).
    ref_rows: u64,
    /// Per-bucket algorithms of the reference's bits (off: `GLM5V_GPU_LT_BUCKETS=0`).
    buckets: bool,
    algos: Mutex<HashMap<GemmKey, Chosen>>,
}

// SAFETY: the handle is used from the tower's one stream; cuBLASLt handles are thread safe
// for calls that do not share output buffers, and the algorithm cache is behind a mutex.
unsafe impl Send for LtGemm {}
unsafe impl Sync for LtGemm {}

#[derive(Debug, Clone, Copy)]
struct Chosen {
    /// The reference algorithm (chosen at [`REF_ROWS`]).
    reference: lt::cublasLtMatmulAlgo_t,
    /// Per [`BUCKET_ROWS`] entry: the algorithm (the reference, or one probed to give its bits).
    algo: [lt::cublasLtMatmulAlgo_t; BUCKET_ROWS.len()],
    /// The compute type the algorithms were found for (f32 falls back from pedantic to plain
    /// 32F, which in cuBLASLt is strict FP32 as well: TF32 needs `COMPUTE_32F_FAST_TF32`).
    compute: lt::cublasComputeType_t,
}

/// The [`BUCKET_ROWS`] entry a GEMM of `rows` rows runs with (`None`: the reference).
fn bucket(rows: u64) -> Option<usize> {
    BUCKET_ROWS.iter().position(|&b| rows <= b)
}

fn check(op: &str, s: lt::cublasStatus_t) -> Result<(), GpuError> {
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Blas {
            op: format!("cuBLASLt {op}"),
            message: format!("{s:?}"),
        })
    }
}

/// Descriptors of one GEMM `D [out, rows] = Aᵀ [out, k] · B [k, rows]` (column-major), freed on
/// drop.
struct Descs {
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    c: lt::cublasLtMatrixLayout_t,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each was created by `Descs::new` (null ones are skipped) and is freed once.
        unsafe {
            for l in [self.a, self.b, self.c] {
                if !l.is_null() {
                    lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

impl Descs {
    fn new(
        ab: lt::cudaDataType,
        c_type: lt::cudaDataType,
        compute: lt::cublasComputeType_t,
        k: u64,
        out: u64,
        rows: u64,
    ) -> Result<Self, GpuError> {
        let mut d = Descs {
            desc: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            c: std::ptr::null_mut(),
        };
        // SAFETY: out-pointers live across the calls; attribute buffers match their sizes.
        unsafe {
            check(
                "MatmulDescCreate",
                lt::cublasLtMatmulDescCreate(&mut d.desc, compute, lt::cudaDataType::CUDA_R_32F),
            )?;
            use lt::cublasLtMatmulDescAttributes_t as M;
            // A transposed (CUBLAS_OP_T = 1), B as stored (CUBLAS_OP_N = 0)
            for (attr, op, name) in [
                (M::CUBLASLT_MATMUL_DESC_TRANSA, 1i32, "TRANSA"),
                (M::CUBLASLT_MATMUL_DESC_TRANSB, 0i32, "TRANSB"),
            ] {
                check(
                    &format!("MatmulDescSetAttribute({name})"),
                    lt::cublasLtMatmulDescSetAttribute(
                        d.desc,
                        attr,
                        &op as *const i32 as *const c_void,
                        4,
                    ),
                )?;
            }
            let ki = k as i64;
            check(
                "MatrixLayoutCreate(A)",
                lt::cublasLtMatrixLayoutCreate(&mut d.a, ab, k, out, ki),
            )?;
            check(
                "MatrixLayoutCreate(B)",
                lt::cublasLtMatrixLayoutCreate(&mut d.b, ab, k, rows, ki),
            )?;
            check(
                "MatrixLayoutCreate(C)",
                lt::cublasLtMatrixLayoutCreate(&mut d.c, c_type, out, rows, out as i64),
            )?;
        }
        Ok(d)
    }
}

/// The configuration attribute `attr` of `algo` as a u32 (0 when it cannot be read).
fn config_u32(
    algo: &lt::cublasLtMatmulAlgo_t,
    attr: lt::cublasLtMatmulAlgoConfigAttributes_t,
) -> u32 {
    let (mut v, mut written) = (0u32, 0usize);
    // SAFETY: a 4-byte buffer for a 4-byte attribute.
    let s = unsafe {
        lt::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            &mut v as *mut u32 as *mut c_void,
            4,
            &mut written,
        )
    };
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        v
    } else {
        0
    }
}

impl LtGemm {
    /// A cuBLASLt handle, or an error when the library is missing or does not start.
    pub fn open() -> Result<Self, GpuError> {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { lt::is_culib_present() } {
            return Err(GpuError::MissingLibrary {
                library: "cuBLASLt (libcublasLt)",
            });
        }
        // read before the handle is made, so that a bad value leaks nothing
        let ref_rows = crate::env::usize_var("GLM5V_GPU_LT_ROWS", REF_ROWS as usize, 1)? as u64;
        let buckets = crate::env::usize_var("GLM5V_GPU_LT_BUCKETS", 1, 0)? != 0;
        let mut handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: out-pointer valid.
        check("Create", unsafe { lt::cublasLtCreate(&mut handle) })?;
        Ok(Self {
            handle,
            ref_rows,
            buckets,
            algos: Mutex::new(HashMap::new()),
        })
    }

    /// The algorithms for `key` (chosen on first use, then the same for every call): `w` is a
    /// weight of that key (the probe's), `stream` the stream the probe runs on.
    fn chosen(&self, key: GemmKey, w: u64, stream: *mut c_void) -> Result<Chosen, GpuError> {
        let mut cache = self.algos.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&key) {
            return Ok(*c);
        }
        let mut computes = vec![key.compute];
        if key.compute == lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC {
            computes.push(lt::cublasComputeType_t::CUBLAS_COMPUTE_32F);
        }
        let mut why = String::new();
        for compute in computes {
            match self.candidates(key, compute, self.ref_rows) {
                Ok(list) if !list.is_empty() => {
                    let reference = list[0];
                    let algo = if self.buckets {
                        classes::per_bucket(self, key, compute, reference, w, stream)?
                    } else {
                        [reference; BUCKET_ROWS.len()]
                    };
                    let c = Chosen {
                        reference,
                        algo,
                        compute,
                    };
                    cache.insert(key, c);
                    return Ok(c);
                }
                Ok(_) => why = format!("no algorithm without a split reduction for {compute:?}"),
                Err(e) => why = e.to_string(),
            }
        }
        Err(GpuError::Blas {
            op: format!(
                "cuBLASLt algorithm for a [{} x {}] weight ({:?} -> {:?})",
                key.out, key.k, key.ab, key.c
            ),
            message: why,
        })
    }

    /// The heuristics' algorithms for `key` at `rows` rows that need no workspace and do not
    /// split the reduction, best guess first.
    fn candidates(
        &self,
        key: GemmKey,
        compute: lt::cublasComputeType_t,
        rows: u64,
    ) -> Result<Vec<lt::cublasLtMatmulAlgo_t>, GpuError> {
        let d = Descs::new(key.ab, key.c, compute, key.k, key.out, rows)?;
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        // SAFETY: out-pointers and attribute buffers valid; `pref` freed below.
        unsafe {
            check(
                "MatmulPreferenceCreate",
                lt::cublasLtMatmulPreferenceCreate(&mut pref),
            )?;
        }
        let result = (|| {
            let ws: u64 = 0;
            let align: u32 = if key.aligned { 16 } else { 4 };
            // SAFETY: `pref` is live; buffers match the attribute sizes.
            unsafe {
                check(
                    "MatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
                    lt::cublasLtMatmulPreferenceSetAttribute(
                        pref,
                        lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                        &ws as *const u64 as *const c_void,
                        8,
                    ),
                )?;
                for attr in [
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                ] {
                    check(
                        "MatmulPreferenceSetAttribute(MIN_ALIGNMENT)",
                        lt::cublasLtMatmulPreferenceSetAttribute(
                            pref,
                            attr,
                            &align as *const u32 as *const c_void,
                            4,
                        ),
                    )?;
                }
            }
            // SAFETY: zeroed plain-data results, filled by the heuristics up to `count`.
            let mut results: Vec<lt::cublasLtMatmulHeuristicResult_t> =
                vec![unsafe { std::mem::zeroed() }; CANDIDATES];
            let mut count = 0i32;
            // SAFETY: descriptors live; `results` holds CANDIDATES entries.
            check("MatmulAlgoGetHeuristic", unsafe {
                lt::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    d.desc,
                    d.a,
                    d.b,
                    d.c,
                    d.c,
                    pref,
                    CANDIDATES as i32,
                    results.as_mut_ptr(),
                    &mut count,
                )
            })?;
            use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
            Ok(results[..count.max(0) as usize]
                .iter()
                .filter_map(|r| {
                    let ok = r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                        && r.workspaceSize == 0
                        && config_u32(&r.algo, A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1
                        && config_u32(&r.algo, A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) == 0;
                    ok.then_some(r.algo)
                })
                .collect())
        })();
        // SAFETY: created above, freed once.
        unsafe { lt::cublasLtMatmulPreferenceDestroy(pref) };
        result
    }

    /// `y [rows, out] = x [rows, k] · w [out, k]ᵀ` (row-major) with the algorithm of `key`, on
    /// `stream`.
    ///
    /// # Safety
    /// The pointers are live device buffers of at least the sizes the shape implies, in the
    /// key's element types.
    pub unsafe fn gemm(
        &self,
        key: GemmKey,
        w: u64,
        x: u64,
        y: u64,
        rows: u64,
        stream: *mut c_void,
    ) -> Result<(), GpuError> {
        let c = self.chosen(key, w, stream)?;
        let algo = bucket(rows).map_or(&c.reference, |b| &c.algo[b]);
        // SAFETY: per the caller's contract.
        unsafe { self.matmul(key, c.compute, algo, w, x, y, rows, stream) }
    }

    /// One `cublasLtMatmul` of `algo`.
    ///
    /// # Safety
    /// As [`LtGemm::gemm`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn matmul(
        &self,
        key: GemmKey,
        compute: lt::cublasComputeType_t,
        algo: &lt::cublasLtMatmulAlgo_t,
        w: u64,
        x: u64,
        y: u64,
        rows: u64,
        stream: *mut c_void,
    ) -> Result<(), GpuError> {
        let d = Descs::new(key.ab, key.c, compute, key.k, key.out, rows)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: per the caller's contract; no workspace (the algorithm needs none).
        check(
            &format!("Matmul [{rows} x {}] x [{} x {}]", key.k, key.k, key.out),
            unsafe {
                lt::cublasLtMatmul(
                    self.handle,
                    d.desc,
                    &alpha as *const f32 as *const c_void,
                    w as *const c_void,
                    d.a,
                    x as *const c_void,
                    d.b,
                    &beta as *const f32 as *const c_void,
                    y as *const c_void,
                    d.c,
                    y as *mut c_void,
                    d.c,
                    algo,
                    std::ptr::null_mut(),
                    0,
                    stream as lt::cudaStream_t,
                )
            },
        )
    }

    /// Whether `algo` supports `key`'s GEMM at `rows` rows (cuBLASLt's own check).
    fn supports(
        &self,
        key: GemmKey,
        compute: lt::cublasComputeType_t,
        algo: &lt::cublasLtMatmulAlgo_t,
        rows: u64,
    ) -> bool {
        let Ok(d) = Descs::new(key.ab, key.c, compute, key.k, key.out, rows) else {
            return false;
        };
        // SAFETY: zeroed plain-data result; the descriptors are live.
        let mut r: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let s = unsafe {
            lt::cublasLtMatmulAlgoCheck(self.handle, d.desc, d.a, d.b, d.c, d.c, algo, &mut r)
        };
        s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS && r.workspaceSize == 0
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // SAFETY: created in `open`, destroyed once.
        unsafe { lt::cublasLtDestroy(self.handle) };
    }
}
