//! The arithmetic ceiling the CPU benchmarks compare against: AVX-512 fused multiply-adds on
//! registers only (12 independent accumulators, no memory operands), on several threads at once.
//!
//! Written in inline assembly because a compiled loop can keep accumulators on the stack: a Rust
//! version with 24 accumulators did (9 spilled) and measured store-to-load forwarding instead of
//! the FMA units (101-108 GFLOP/s a core on the machine where this loop measures 176-182).

/// Flops of one loop iteration: 12 fused multiply-adds of 16 lanes.
#[cfg(target_arch = "x86_64")]
const FLOPS_PER_ITER: f64 = 12.0 * 16.0 * 2.0;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fmas(iters: usize) {
    // SAFETY: touches only the listed registers and no memory; AVX-512F is enabled here (checked
    // by the caller).
    unsafe {
        std::arch::asm!(
            "vxorps zmm0, zmm0, zmm0", "vxorps zmm1, zmm1, zmm1", "vxorps zmm2, zmm2, zmm2",
            "vxorps zmm3, zmm3, zmm3", "vxorps zmm4, zmm4, zmm4", "vxorps zmm5, zmm5, zmm5",
            "vxorps zmm6, zmm6, zmm6", "vxorps zmm7, zmm7, zmm7", "vxorps zmm8, zmm8, zmm8",
            "vxorps zmm9, zmm9, zmm9", "vxorps zmm10, zmm10, zmm10", "vxorps zmm11, zmm11, zmm11",
            "vxorps zmm30, zmm30, zmm30", "vxorps zmm31, zmm31, zmm31",
            "2:",
            "vfmadd231ps zmm0, zmm30, zmm31", "vfmadd231ps zmm1, zmm30, zmm31",
            "vfmadd231ps zmm2, zmm30, zmm31", "vfmadd231ps zmm3, zmm30, zmm31",
            "vfmadd231ps zmm4, zmm30, zmm31", "vfmadd231ps zmm5, zmm30, zmm31",
            "vfmadd231ps zmm6, zmm30, zmm31", "vfmadd231ps zmm7, zmm30, zmm31",
            "vfmadd231ps zmm8, zmm30, zmm31", "vfmadd231ps zmm9, zmm30, zmm31",
            "vfmadd231ps zmm10, zmm30, zmm31", "vfmadd231ps zmm11, zmm30, zmm31",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iters.max(1) => _,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
            out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _,
            out("zmm10") _, out("zmm11") _, out("zmm30") _, out("zmm31") _,
            options(nostack, nomem),
        );
    }
}

/// GFLOP/s of `threads` threads running the register-only FMA loop at once, best of three runs
/// of `iters` iterations each (200,000,000: ~0.4 s a run on a 3 GHz core); `None` without
/// AVX-512F.
pub fn fma_peak_gflops(threads: usize, iters: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return None;
        }
        let threads = threads.max(1);
        // SAFETY: AVX-512F was detected above.
        let best = best_of_three(
            threads,
            threads as f64 * iters.max(1) as f64 * FLOPS_PER_ITER,
            || unsafe { fmas(iters) },
        );
        Some(best)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (threads, iters);
        None
    }
}

/// GB/s of `threads` threads reading `bytes` of memory at once (each thread its own part, 16
/// f32 lanes summed per step), best of three reads: the read bandwidth behind the weight-read
/// floor `bench cpu` prints for small grids (a forward at 8x8 reads every weight once and does
/// little arithmetic per byte). The buffer is written before the first read, so its pages are
/// real memory (a zeroed allocation reads the kernel's shared zero page); choose `bytes` well
/// over the last-level cache (1 GiB).
pub fn read_gbs(threads: usize, bytes: usize) -> f64 {
    let threads = threads.max(1);
    let per = (bytes / 4 / threads / 64).max(1) * 64; // f32 values per thread, whole steps
    let bufs: Vec<Vec<f32>> = (0..threads).map(|t| vec![1.0 + t as f32; per]).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = (threads * per * 4) as f64;
    let mut best = 0.0f64;
    for _ in 0..3 {
        next.store(0, std::sync::atomic::Ordering::Relaxed);
        best = best.max(best_of_one(threads, total, || {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % threads;
            let mut acc = [0.0f32; 16];
            for step in bufs[i].chunks_exact(16) {
                for (a, &x) in acc.iter_mut().zip(step) {
                    *a += x;
                }
            }
            std::hint::black_box(acc);
        }));
    }
    best
}

/// `work / 1e9` per second of `threads` threads running `run` once each, at once.
fn best_of_one(threads: usize, work: f64, run: impl Fn() + Sync) -> f64 {
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(&run);
        }
    });
    work / t.elapsed().as_secs_f64() / 1e9
}

/// GFLOP/s of `threads` threads (at least 1) running `run` at once, `flops` in all, best of three
/// runs: the timing harness of every ceiling loop (FMA here, `kernels::amx`, `kernels::dpbf16`).
pub(crate) fn best_of_three(threads: usize, flops: f64, run: impl Fn() + Sync) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        best = best.max(best_of_one(threads, flops, &run));
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop runs on one and on two threads and gives a finite positive rate for each. How
    /// the two compare is left to the benchmarks (`bench cpu` prints the two-thread ceiling): a
    /// test asserting "two threads no slower than one" failed in a CI rehearsal while other
    /// builds shared the machine (127 against 175 GFLOP/s). Skipped without AVX-512F.
    #[test]
    fn peak_is_measured_per_thread_count() {
        let Some(one) = fma_peak_gflops(1, 20_000_000) else {
            eprintln!("skipped: no AVX-512F");
            return;
        };
        assert!(one.is_finite() && one > 0.0, "one thread: {one} GFLOP/s");
        let two = fma_peak_gflops(2, 20_000_000).expect("AVX-512F");
        assert!(two.is_finite() && two > 0.0, "two threads: {two} GFLOP/s");
        println!("FMA peak: {one:.1} GFLOP/s on one thread, {two:.1} on two");
    }

    /// The read loop gives a finite positive bandwidth on one and two threads (64 MiB: over the
    /// caches of the machines here; the bench reads 1 GiB).
    #[test]
    fn read_bandwidth_is_measured() {
        for threads in [1, 2] {
            let gbs = read_gbs(threads, 64 << 20);
            assert!(
                gbs.is_finite() && gbs > 0.0,
                "{threads} threads: {gbs} GB/s"
            );
            println!("read: {gbs:.1} GB/s on {threads} threads");
        }
    }
}
