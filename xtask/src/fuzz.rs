//! `cargo xtask fuzz [--seconds N] [TARGET...]`: runs each cargo-fuzz target of `fuzz/` for N
//! seconds, one after the other, and prints executions, coverage and findings per target.
//!
//! Shells out to `cargo fuzz run <target> fuzz/corpus/<target> fuzz/corpus/seed/<target> --
//! -max_total_time=N` with `RUSTC_BOOTSTRAP=1` (cargo-fuzz passes `-Z` flags, which stable
//! rustc accepts only with it; no other toolchain is needed). New corpus entries go to
//! `fuzz/corpus/<target>/` (ignored by git); crashes to `fuzz/artifacts/<target>/`. `video` runs
//! only when named (it needs FFmpeg's development libraries: `--features video`). With
//! `CARGO_TARGET_DIR` set, the fuzz builds go to its `fuzz/` subdirectory (their flags differ
//! from every other build's); else to `fuzz/target/`.
//!
//! The differential targets of issue 26 (`prep_images`, `split_inflate`, `jpeg_stripes`,
//! `formats`, `gemm`) check the production paths against a second implementation or a stated
//! bound, not only for panics; see each target's module text.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// Every target in `fuzz/Cargo.toml`.
pub const TARGETS: &[&str] = &[
    "image",
    "data_uri",
    "config_json",
    "checkpoint",
    "prep_images",
    "split_inflate",
    "jpeg_stripes",
    "formats",
    "gemm",
];

/// Targets run only when named, each with the fuzz crate's features it needs (`video` links the
/// system's FFmpeg libraries, as prep's `video` feature does).
pub const OPT_IN: &[(&str, &str)] = &[("video", "video")];

/// `--features F` for a target that needs them.
pub fn feature_args(target: &str) -> Vec<String> {
    OPT_IN
        .iter()
        .find(|(t, _)| *t == target)
        .map(|(_, f)| vec!["--features".to_string(), f.to_string()])
        .unwrap_or_default()
}

/// `--target-dir` for cargo-fuzz: `$CARGO_TARGET_DIR/fuzz` when that is set.
pub fn target_dir_args() -> Vec<String> {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => vec![
            "--target-dir".into(),
            Path::new(&d).join("fuzz").display().to_string(),
        ],
        _ => Vec::new(),
    }
}

/// What one libFuzzer run reported.
#[derive(Debug, Default)]
struct Summary {
    execs: Option<u64>,
    cov: Option<u64>,
    features: Option<u64>,
    corpus: Option<String>,
    artifacts: Vec<String>,
    /// Inputs libFuzzer reported as slow (`-report_slow_units`): listed, not failures.
    slow: Vec<String>,
    exit: Option<i32>,
    /// Wall-clock seconds of the run (the build before it not included).
    seconds: f64,
}

/// The number after `key` in a libFuzzer status line (`#1234 DONE cov: 56 ft: 78 corp: 9/1Kb`).
fn field(line: &str, key: &str) -> Option<String> {
    let rest = line.split(key).nth(1)?;
    rest.split_whitespace().next().map(str::to_string)
}

fn parse_line(s: &mut Summary, line: &str) {
    if let Some(n) = line.strip_prefix('#') {
        if let Some(e) = n.split_whitespace().next().and_then(|x| x.parse().ok()) {
            s.execs = Some(e);
        }
        if let Some(c) = field(line, "cov: ").and_then(|x| x.parse().ok()) {
            s.cov = Some(c);
        }
        if let Some(f) = field(line, "ft: ").and_then(|x| x.parse().ok()) {
            s.features = Some(f);
        }
        if let Some(c) = field(line, "corp: ") {
            s.corpus = Some(c);
        }
    } else if let Some(rest) = line.strip_prefix("Done ") {
        // "Done 123456 runs in 60 second(s)"
        if let Some(e) = rest.split_whitespace().next().and_then(|x| x.parse().ok()) {
            s.execs = Some(e);
        }
    }
    if let Some(p) = line.split("Test unit written to ").nth(1) {
        let p = p.trim().to_string();
        if p.contains("/slow-unit-") {
            s.slow.push(p);
        } else {
            s.artifacts.push(p);
        }
    }
}

/// Runs the targets (all when `targets` is empty) for `seconds` each, then prints one table.
/// Fails when cargo-fuzz is missing, a target is unknown, or any target found a crash.
pub fn run(repo_root: &Path, seconds: u64, targets: &[String]) -> anyhow::Result<()> {
    let targets: Vec<String> = if targets.is_empty() {
        TARGETS.iter().map(|t| t.to_string()).collect()
    } else {
        targets.to_vec()
    };
    let known = |t: &str| TARGETS.contains(&t) || OPT_IN.iter().any(|(o, _)| *o == t);
    if let Some(t) = targets.iter().find(|t| !known(t)) {
        bail!(
            "unknown fuzz target `{t}` (targets: {}; when named: {})",
            TARGETS.join(", "),
            OPT_IN
                .iter()
                .map(|(t, _)| *t)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let probe = Command::new("cargo").args(["fuzz", "--version"]).output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        bail!("cargo-fuzz is not installed: `cargo install cargo-fuzz` (it builds from crates.io)");
    }
    let mut rows = Vec::new();
    for t in &targets {
        let corpus = format!("fuzz/corpus/{t}");
        let seed = format!("fuzz/corpus/seed/{t}");
        std::fs::create_dir_all(repo_root.join(&corpus))
            .with_context(|| format!("creating {corpus}"))?;
        println!("== fuzz {t}: {seconds} s (corpus {corpus}, seeds {seed})");
        // the build first, so that the run's seconds are the fuzzer's
        let built = Command::new("cargo")
            .current_dir(repo_root)
            .env("RUSTC_BOOTSTRAP", "1")
            .args(["fuzz", "build", t])
            .args(feature_args(t))
            .args(target_dir_args())
            .status()
            .context("running cargo fuzz build")?;
        if !built.success() {
            bail!("cargo fuzz build {t} failed");
        }
        let t0 = std::time::Instant::now();
        let mut child = Command::new("cargo")
            .current_dir(repo_root)
            .env("RUSTC_BOOTSTRAP", "1")
            // panics keep their backtraces, but `std::backtrace::Backtrace::capture` stays off:
            // rav1d built with debug assertions (as cargo-fuzz builds) captures one for every
            // borrow its `DisjointMut` tracks, which made one 1024 x 770 AVIF take minutes
            .env("RUST_LIB_BACKTRACE", "0")
            .args(["fuzz", "run", t])
            .args(feature_args(t))
            .args(target_dir_args())
            .args([&corpus, &seed, "--"])
            .arg(format!("-max_total_time={seconds}"))
            // 60 s: under ASan and debug assertions a 1-Mpixel AVIF's four decodes (plan, load,
            // prep_images at 1 and 2 threads) take 10-15 s on a busy core
            .args(["-timeout=60", "-rss_limit_mb=2048", "-print_final_stats=1"])
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .spawn()
            .context("running cargo fuzz")?;
        let mut s = Summary::default();
        let stderr = child.stderr.take().expect("piped stderr");
        for line in BufReader::new(stderr).lines() {
            let line = line.context("reading cargo fuzz output")?;
            parse_line(&mut s, &line);
            // progress and findings, not every NEW/REDUCE line
            let show = line.contains("pulse")
                || line.contains("DONE")
                || line.contains("INITED")
                || line.starts_with("Done ")
                || line.starts_with("error")
                || line.contains("ERROR")
                || line.contains("panicked")
                || line.contains("Test unit written")
                || line.starts_with("stat::");
            if show {
                eprintln!("  {line}");
            }
        }
        s.exit = child.wait().context("waiting for cargo fuzz")?.code();
        s.seconds = t0.elapsed().as_secs_f64();
        rows.push((t.clone(), s));
    }

    println!("\n| target | seconds | executions | cov | ft | corpus | findings |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
    let mut failed = Vec::new();
    for (t, s) in &rows {
        let findings = if !s.artifacts.is_empty() {
            failed.push(t.clone());
            format!("CRASH: {}", s.artifacts.join(", "))
        } else if s.exit == Some(0) && !s.slow.is_empty() {
            format!("none (slow units, not failures: {})", s.slow.join(", "))
        } else if s.exit == Some(0) {
            "none".to_string()
        } else {
            failed.push(t.clone());
            format!("cargo fuzz exited with {:?} (see output above)", s.exit)
        };
        println!(
            "| {t} | {:.0} | {} | {} | {} | {} | {findings} |",
            s.seconds,
            opt(s.execs),
            opt(s.cov),
            opt(s.features),
            s.corpus.as_deref().unwrap_or("?")
        );
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets with findings: {} (reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <artifact>; \
             add each as a regression test in conformance/tests/catalog.rs)",
            failed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libfuzzer_status_lines() {
        let mut s = Summary::default();
        for l in [
            "#2\tINITED cov: 120 ft: 130 corp: 5/2Kb exec/s: 0 rss: 40Mb",
            "#524288\tpulse  cov: 900 ft: 2100 corp: 300/40Kb lim: 4096 exec/s: 8738 rss: 300Mb",
            "#600000\tDONE   cov: 912 ft: 2150 corp: 310/41Kb lim: 4096 exec/s: 10000 rss: 310Mb",
            "Done 600000 runs in 60 second(s)",
            "artifact_prefix='fuzz/artifacts/image/'; Test unit written to fuzz/artifacts/image/crash-abc",
            "artifact_prefix='fuzz/artifacts/image/'; Test unit written to fuzz/artifacts/image/slow-unit-def",
        ] {
            parse_line(&mut s, l);
        }
        assert_eq!(
            (s.execs, s.cov, s.features),
            (Some(600_000), Some(912), Some(2150))
        );
        assert_eq!(s.corpus.as_deref(), Some("310/41Kb"));
        assert_eq!(
            s.artifacts,
            vec!["fuzz/artifacts/image/crash-abc".to_string()]
        );
        assert_eq!(
            s.slow,
            vec!["fuzz/artifacts/image/slow-unit-def".to_string()]
        );
    }
}
