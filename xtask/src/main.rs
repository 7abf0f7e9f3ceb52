//! Project automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! Thin on purpose: it shells out to `cargo` and to the built `glm5v`, so CI compiles the heavy
//! crates once (in release) and this crate in seconds.
//!
//! - `cargo xtask conformance [--backend cpu|gpu]`: fixtures --check, the workspace tests in
//!   release, then `glm5v conformance`; one summary table; non-zero on any failure.
//! - `cargo xtask fixtures --check`: the committed fixtures match their manifests (no Python).
//! - `cargo xtask tree`: no source file of ours over 1200 lines (tests aside).
//! - `cargo xtask bench prep|cpu`: benchmarks against upstream (needs the Python venv).
//! - `cargo xtask docs-check`: the README's and docs' blocks marked `check` still run.
//! - `cargo xtask mutants-lite`: deliberate mistakes in a scratch copy; the fixtures must catch each.

mod bench;
mod conformance;
mod docs_check;
mod fixtures;
mod fuzz;
mod mutants;
mod sanitize;
mod tree;
mod util;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  conformance [--backend cpu|gpu]   fixtures --check, cargo test --workspace --release,
                                    glm5v conformance; ends with one summary table
  conformance --corpus              Pillow 13.0.0's Tests/images against upstream's verdicts
                                    (fixtures/corpus; fetches the sdist from PyPI into
                                    target/corpus/ once; a table per format)
  mutants-lite                      apply deliberate mistakes to the CPU reference in a scratch
                                    copy and check that the tower fixtures fail for each (slow)
  fuzz [--seconds N] [TARGET...]    run the cargo-fuzz targets of fuzz/ for N seconds each
                                    (default 60; needs cargo-fuzz)
  sanitize [STEP...]                prep tests, a reference subset, the kernels' tests and the
                                    fuzz corpora under ASan, threaded prep tests under TSan
                                    (asan-prep, asan-reference, asan-kernels, asan-fuzz,
                                    tsan-prep; minutes each)
  fixtures --check                  verify committed fixtures against their manifests
  tree                              no source file of ours over 1200 lines (tests aside;
                                    third_party/ and target/ skipped)
  docs-check [--list]               run the README's and docs/'s code blocks marked `check`
                                    (cheap commands on the fixtures, the Rust example, Python)
  bench python [OPTIONS]            python -m glm5v.bench: the Python package's processor against
                                    upstream's in one process (builds the wheel; python/bench.sh)
  bench prep|cpu|gpu|serve|corpus [OPTIONS]
                                    glm5v bench: ours against upstream transformers (needs the
                                    venv: $GLM5V_VENV or /work/venv with torch, else a python3
                                    with torch; else skipped); gpu: CUDA device, else skipped;
                                    serve: the HTTP service under load; corpus: a directory into
                                    Parquet; `bench --backend gpu` is the same as `bench gpu`
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("conformance") => conformance::run(&args[1..]),
        Some("fixtures") => fixtures_cmd(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("mutants-lite") => mutants::run(&args[1..]),
        Some("docs-check") => docs_check::run(&args[1..]),
        Some("fuzz") => fuzz_cmd(&args[1..]),
        Some("sanitize") => sanitize::run(&util::repo_root(), &args[1..]),
        Some("tree") => tree::run(&args[1..]),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(anyhow::anyhow!("unknown task `{other}`\n\n{USAGE}")),
        None => Err(anyhow::anyhow!("no task given\n\n{USAGE}")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn fuzz_cmd(args: &[String]) -> anyhow::Result<bool> {
    let mut seconds = 60u64;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--seconds" {
            let v = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("--seconds needs a value"))?;
            seconds = v
                .parse()
                .map_err(|_| anyhow::anyhow!("--seconds: not a number: {v}"))?;
        } else {
            targets.push(a.clone());
        }
    }
    fuzz::run(&util::repo_root(), seconds, &targets)?;
    Ok(true)
}

fn fixtures_cmd(args: &[String]) -> anyhow::Result<bool> {
    if args != ["--check"] {
        anyhow::bail!(
            "usage: cargo xtask fixtures --check (regenerating fixtures needs the Python venv: see fixtures/README.md)"
        );
    }
    Ok(conformance::fixtures_check(&util::repo_root())?.ok)
}
