//! Per-bucket algorithms with the reference's bits: each candidate runs once on a probe beside
//! the reference algorithm and is kept only when every output element is identical.
//!
//! The probe: [`PROBE_ROWS`] rows of random inputs (a deterministic sequence, finite values of
//! the key's input type, never zero) against the real weight of the key, so the check runs the
//! GEMM the tower runs, at a row count that leaves partial tiles in both algorithms. A
//! candidate that reduces in another order (another k-step, a split, another instruction) moves
//! most elements of such a product by an ulp or more, so one probe tells the orders apart; the
//! device tests (`packings_are_batch_invariant`, `gpu_check --packings`) check whole forwards.

use super::{BUCKET_ROWS, GemmKey, LtGemm, config_u32};
use crate::error::GpuError;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{result as cu, sys};
use std::ffi::c_void;

/// Rows of the probe GEMM (not a multiple of any tile: the edge tiles are checked too).
pub const PROBE_ROWS: u64 = 328;

/// Device memory freed on drop.
struct Mem(sys::CUdeviceptr);

impl Mem {
    fn new(bytes: usize) -> Result<Self, GpuError> {
        // SAFETY: a plain allocation; freed once by Drop.
        unsafe { cu::malloc_sync(bytes.max(1)) }
            .map(Mem)
            .map_err(|e| GpuError::cuda(format!("cuMemAlloc of {bytes} bytes (GEMM probe)"), e))
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated by `Mem::new`; the probe's work on it was synchronized.
        unsafe {
            let _ = cu::free_sync(self.0);
        }
    }
}

/// Bytes of one element of a cuBLASLt data type the tower uses.
fn elem_bytes(t: lt::cudaDataType) -> usize {
    match t {
        lt::cudaDataType::CUDA_R_16BF | lt::cudaDataType::CUDA_R_16F => 2,
        _ => 4,
    }
}

/// `n` random inputs of type `t` as bytes: bf16 and f32 from uniform values in (-1, 1), IEEE
/// half built from a sign, an exponent for 2^-6 .. 2^-1 and a mantissa (finite, nonzero).
fn probe_inputs(t: lt::cudaDataType, n: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::with_capacity(n * elem_bytes(t));
    for _ in 0..n {
        let r = next();
        let unit = (r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        let unit = if unit == 0.0 { 0.5 } else { unit };
        match t {
            lt::cudaDataType::CUDA_R_16BF => {
                out.extend_from_slice(&((unit.to_bits() >> 16) as u16).to_le_bytes())
            }
            lt::cudaDataType::CUDA_R_16F => {
                let sign = ((r >> 8) & 1) as u16;
                let exp = 9 + (r % 6) as u16;
                let mant = ((r >> 16) & 0x3ff) as u16;
                out.extend_from_slice(&((sign << 15) | (exp << 10) | mant).to_le_bytes());
            }
            _ => out.extend_from_slice(&unit.to_le_bytes()),
        }
    }
    out
}

/// The configuration of `algo` in a few words (for `GLM5V_GPU_LT_LOG=1`).
fn describe(algo: &lt::cublasLtMatmulAlgo_t) -> String {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
    format!(
        "algo {} tile {} stages {} cluster {} inner {} swizzle {} custom {}",
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_ID),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_TILE_ID),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_STAGES_ID),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        config_u32(algo, A::CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
    )
}

/// For each of [`BUCKET_ROWS`], the heuristics' first algorithm at that row count whose probe
/// output is the reference's bit for bit (the reference itself when none is).
pub(super) fn per_bucket(
    g: &LtGemm,
    key: GemmKey,
    compute: lt::cublasComputeType_t,
    reference: lt::cublasLtMatmulAlgo_t,
    w: u64,
    stream: *mut c_void,
) -> Result<[lt::cublasLtMatmulAlgo_t; BUCKET_ROWS.len()], GpuError> {
    let cuda = |op: &'static str| move |e| GpuError::cuda(format!("{op} (GEMM probe)"), e);
    let cs = stream as sys::CUstream;
    // SAFETY: a query of a live stream.
    let capturing = unsafe { cu::stream::is_capturing(cs) }.map_err(cuda("cuStreamIsCapturing"))?;
    if capturing != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        // The probe synchronizes; the tower's first forward (never captured) meets every key.
        return Err(GpuError::Unsupported(format!(
            "a [{} x {}] GEMM weight first used during a CUDA graph capture",
            key.out, key.k
        )));
    }
    let (p, k, out) = (PROBE_ROWS as usize, key.k as usize, key.out as usize);
    let out_bytes = p * out * elem_bytes(key.c);
    let x = Mem::new(p * k * elem_bytes(key.ab))?;
    let (y_ref, y) = (Mem::new(out_bytes)?, Mem::new(out_bytes)?);
    let inputs = probe_inputs(key.ab, p * k);
    // SAFETY: `x` holds exactly `inputs.len()` bytes; the stream's earlier work on the
    // tower's buffers does not touch the probe's.
    unsafe { cu::memcpy_htod_sync(x.0, &inputs) }.map_err(cuda("cuMemcpyHtoD"))?;
    let run = |algo: &lt::cublasLtMatmulAlgo_t, dst: &Mem| -> Result<Vec<u8>, GpuError> {
        // SAFETY: the buffers are live and sized for a PROBE_ROWS-row GEMM of `key`; `w` is a
        // weight of `key` (the caller's); synchronized before the copy back.
        unsafe {
            cu::memset_d8_sync(dst.0, 0xff, out_bytes).map_err(cuda("cuMemsetD8"))?;
            g.matmul(key, compute, algo, w, x.0, dst.0, PROBE_ROWS, stream)?;
            cu::stream::synchronize(cs).map_err(cuda("cuStreamSynchronize"))?;
            let mut host = vec![0u8; out_bytes];
            cu::memcpy_dtoh_sync(&mut host, dst.0).map_err(cuda("cuMemcpyDtoH"))?;
            Ok(host)
        }
    };
    let want = run(&reference, &y_ref)?;
    // the reference must be reproducible, or no comparison means anything
    if run(&reference, &y)? != want {
        return Err(GpuError::Blas {
            op: format!("cuBLASLt reference GEMM [{} x {}]", key.out, key.k),
            message: "two runs of the same algorithm on the same probe differ".into(),
        });
    }
    let mut verdicts: Vec<(lt::cublasLtMatmulAlgo_t, bool)> = vec![(reference, true)];
    let mut chosen = [reference; BUCKET_ROWS.len()];
    let log = std::env::var("GLM5V_GPU_LT_LOG").as_deref() == Ok("1");
    let mut lines = Vec::new();
    let mut lo = 0u64;
    for (b, &rows) in BUCKET_ROWS.iter().enumerate() {
        let mut refused = 0usize;
        for cand in g.candidates(key, compute, rows)? {
            let known = verdicts
                .iter()
                .find(|(a, _)| a.data == cand.data)
                .map(|v| v.1);
            let same = match known {
                Some(v) => v,
                None => {
                    let usable = [PROBE_ROWS, lo + 1, rows]
                        .iter()
                        .all(|&r| g.supports(key, compute, &cand, r));
                    let v = usable && run(&cand, &y)? == want;
                    verdicts.push((cand, v));
                    v
                }
            };
            if same {
                chosen[b] = cand;
                break;
            }
            refused += 1;
        }
        if log {
            lines.push(format!(
                "  <= {rows} rows: {}{} ({refused} faster guesses refused)",
                describe(&chosen[b]),
                if chosen[b].data == reference.data {
                    ", the reference"
                } else {
                    ""
                },
            ));
        }
        lo = rows;
    }
    if log {
        eprintln!(
            "glm5v: GEMM [{} x {}] {:?} -> {:?}: reference (at {} rows) {}; {} of {} algorithms probed give its bits\n{}",
            key.out,
            key.k,
            key.ab,
            key.c,
            g.ref_rows,
            describe(&reference),
            verdicts.iter().filter(|v| v.1).count(),
            verdicts.len(),
            lines.join("\n")
        );
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_inputs_are_finite_nonzero_and_deterministic() {
        for t in [
            lt::cudaDataType::CUDA_R_16BF,
            lt::cudaDataType::CUDA_R_16F,
            lt::cudaDataType::CUDA_R_32F,
        ] {
            let a = probe_inputs(t, 4096);
            assert_eq!(a, probe_inputs(t, 4096));
            assert_eq!(a.len(), 4096 * elem_bytes(t));
            let vals: Vec<f32> = match t {
                lt::cudaDataType::CUDA_R_16BF => a
                    .chunks(2)
                    .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                lt::cudaDataType::CUDA_R_16F => a
                    .chunks(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                _ => a
                    .chunks(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            };
            assert!(
                vals.iter()
                    .all(|v| v.is_finite() && *v != 0.0 && v.abs() < 1.0)
            );
            // spread over both signs and many magnitudes, not a constant
            assert!(
                vals.iter().any(|&v| v < -0.25) && vals.iter().any(|&v| v > 0.25),
                "{t:?}"
            );
            let distinct: std::collections::HashSet<u32> =
                vals.iter().map(|v| v.to_bits()).collect();
            assert!(distinct.len() > 1000, "{t:?}: {} distinct", distinct.len());
        }
    }

    #[test]
    fn row_counts_map_to_their_buckets() {
        use super::super::bucket;
        assert_eq!(bucket(1), Some(0));
        assert_eq!(bucket(64), Some(0));
        assert_eq!(bucket(65), Some(1));
        assert_eq!(bucket(1024), Some(2));
        // above the last bucket: the reference
        assert_eq!(bucket(1025), None);
        assert_eq!(bucket(1 << 20), None);
    }
}
