//! The FMA ceiling the CPU benches compare against: AVX-512 fused multiply-adds on registers
//! only (12 independent accumulators, no loads), on 1..=N threads at once.
//!
//!     cargo run --release -p glm5v-reference --example fma_peak -- [threads]
//!
//! Written in inline assembly because a compiled loop can keep accumulators on the stack: a Rust
//! version with 24 accumulators did (9 spilled), and measured store-to-load forwarding instead
//! of the FMA units (101-108 GFLOP/s a core where this loop measures 176-182).

use std::time::Instant;

/// 12 x 16 lanes x 2 flops per iteration.
const FLOPS_PER_ITER: f64 = 12.0 * 16.0 * 2.0;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fmas(iters: usize) {
    // SAFETY: touches only the listed registers; AVX-512F is enabled here (checked by main).
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

fn main() {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            println!("no AVX-512F on this CPU: nothing to measure");
            return;
        }
        let max: usize = std::env::args()
            .nth(1)
            .map(|a| a.parse().expect("threads: a number"))
            .unwrap_or(2);
        let iters = 200_000_000;
        for threads in 1..=max {
            let mut best = 0.0f64;
            for _ in 0..3 {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        // SAFETY: AVX-512F was detected above.
                        s.spawn(|| unsafe { fmas(iters) });
                    }
                });
                let gflops = threads as f64 * iters as f64 * FLOPS_PER_ITER
                    / t.elapsed().as_secs_f64()
                    / 1e9;
                best = best.max(gflops);
            }
            println!("{threads} thread(s): {best:.1} GFLOP/s (best of 3)");
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("not an x86-64 CPU: nothing to measure");
}
