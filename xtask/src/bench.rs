//! `cargo xtask bench prep|cpu|gpu|serve|corpus|batcher|writer|python`: our code against upstream's on the same
//! inputs, same run. `python` runs `python/bench.sh` (the wheel built, then `python -m glm5v.bench` in the
//! fixture venv: ours and upstream's processor in one process).
//!
//! Builds the release `glm5v` and runs `glm5v bench prep|cpu|gpu` (which finds the venv's Python,
//! else `python3`, and runs upstream's side itself); without a Python that has torch and
//! transformers, prep and cpu say "skipped" and succeed; gpu without a CUDA device says "skipped"
//! and succeeds (without a Python it times our side alone). `--backend cpu|gpu` is passed through.

use crate::util::{cargo, repo_root, run_status, target_dir};
use anyhow::{Result, bail};
use std::process::Command;

pub fn run(args: &[String]) -> Result<bool> {
    match args.first().map(String::as_str) {
        Some("python") => {
            let root = repo_root();
            let mut cmd = Command::new("bash");
            cmd.current_dir(&root)
                .arg(root.join("python").join("bench.sh"))
                .args(&args[1..]);
            return run_status(cmd);
        }
        Some("prep" | "cpu" | "gpu" | "serve" | "corpus" | "batcher" | "writer" | "--backend") => {}
        _ => bail!(
            "usage: cargo xtask bench prep|cpu|gpu|serve|corpus|batcher|writer [glm5v bench options, e.g. --reps 3 \
             --grids 8,32 --cases 1008,16x448 --concurrency 8 --duration 30 --sustain 300 --count 200], \
             or cargo xtask bench python [python -m glm5v.bench options]"
        ),
    }
    let root = repo_root();
    let mut build = cargo();
    build
        .current_dir(&root)
        .args(["build", "--release", "-p", "glm5v"]);
    if !run_status(build)? {
        return Ok(false);
    }
    let mut cmd = Command::new(target_dir(&root).join("release").join("glm5v"));
    cmd.current_dir(&root).arg("bench").args(args);
    run_status(cmd)
}
