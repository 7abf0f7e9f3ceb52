//! The `gemm` fuzz target's check (`fuzz/fuzz_targets/gemm_case.rs`, issue 26: the CPU `Linear`
//! kernels against a naive f64 product within a stated error bound) over its committed findings
//! (`fuzz/regressions/gemm/`) and seeds (`fuzz/corpus/seed/gemm/`), so that every finding stays
//! a regression test without cargo-fuzz. A kernel this CPU lacks is skipped by the check itself,
//! but for AMX's, which run emulated (the unit path's packing and blocking, each tile block in
//! software) where there is no unit.

#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/gemm_case.rs"]
mod gemm_case;

use std::path::Path;

#[test]
fn gemm_findings_and_seeds() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in [fuzz.join("regressions/gemm"), fuzz.join("corpus/seed/gemm")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            eprintln!("gemm: {}", f.display());
            gemm_case::check(&std::fs::read(&f).unwrap());
            n += 1;
        }
    }
    assert!(n >= 40, "{n} inputs");
}

/// Finding G1: `amx::split3` of a finite f32 above bf16's largest finite value (3.3895e38) gave
/// `hi` = infinity and NaN for the other parts, so AMX's split-f32 product of such an input was
/// NaN; `split3` now truncates `hi` there. The reproducer, checked strictly.
#[test]
fn gemm_finding_g1_strict() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions/gemm/g1_split3_above_bf16_max");
    gemm_case::check_with(&std::fs::read(f).unwrap(), true);
}
