//! The ceilings the CPU benches compare against: AVX-512 fused multiply-adds on registers only
//! (`kernels::peak`) and AMX `tdpbf16ps` on tile registers only (`kernels::amx`), on 1..=N
//! threads at once.
//!
//!     cargo run --release -p glm5v-reference --example fma_peak -- [threads]

use glm5v_reference::kernels::amx::amx_peak_gflops;
use glm5v_reference::kernels::dpbf16::dpbf16_peak_gflops;
use glm5v_reference::kernels::peak::fma_peak_gflops;

fn main() {
    let max: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("threads: a number"))
        .unwrap_or(2);
    for threads in 1..=max {
        match fma_peak_gflops(threads, 200_000_000) {
            Some(g) => println!("{threads} thread(s): FMA {g:.1} GFLOP/s (best of 3)"),
            None => {
                println!("no AVX-512F on this CPU: nothing to measure");
                return;
            }
        }
    }
    for threads in 1..=max {
        match dpbf16_peak_gflops(threads, 100_000_000) {
            Some(g) => println!("{threads} thread(s): AVX512-BF16 {g:.1} GFLOP/s (best of 3)"),
            None => println!("no AVX512-BF16"),
        }
    }
    for threads in 1..=max {
        match amx_peak_gflops(threads, 5_000_000) {
            Some(g) => println!("{threads} thread(s): AMX bf16 {g:.1} GFLOP/s (best of 3)"),
            None => {
                println!("no AMX (or no tile state granted): nothing to measure");
                return;
            }
        }
    }
}
