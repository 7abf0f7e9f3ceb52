//! `cargo xtask sanitize [STEP...]`: the prep tests, a small reference subset, the concurrency
//! test and the fuzz corpora replayed under AddressSanitizer, and the threaded prep tests under
//! ThreadSanitizer (issue 26). Prints one table: step, seconds, result. Not in CI (minutes).
//!
//! Steps (all when none is named):
//! - `asan-prep`: `cargo test -p glm5v-prep --release` with `-Zsanitizer=address` and debug
//!   assertions on;
//! - `asan-reference`: the reference crate's integration tests on the tiny checkpoints (not the
//!   full-size tower tests, far too slow under ASan) and conformance's concurrency test;
//! - `asan-kernels`: the reference crate's kernel unit tests (`kernels::`: every CPU kernel
//!   against f64, AMX through its emulation where the CPU has no unit);
//! - `asan-fuzz`: every fuzz target's corpus (`fuzz/corpus/<t>` and the committed seeds) run
//!   once by its cargo-fuzz build, which is ASan-instrumented (`-runs=0`);
//! - `tsan-prep`: the prep tests that run on several threads (the two-thread inflate, the
//!   striped JPEG decode, `prep_images`) and the concurrency test, with `-Zsanitizer=thread`.
//!
//! All on the stable toolchain through `RUSTC_BOOTSTRAP=1`, with `--target
//! x86_64-unknown-linux-gnu` so that build scripts and proc macros are built without the
//! sanitizer. Builds go to `$CARGO_TARGET_DIR/<step>` (else `target/<step>`). The C codecs
//! (libjpeg-turbo, libwebp) are not instrumented: ASan sees their reads and writes of Rust-owned
//! memory only through the Rust side's bounds. Without the standard library's sources (no
//! `-Zbuild-std`), ThreadSanitizer does not see inside std's own synchronisation; the report says
//! so when it flags races inside std.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TARGET: &str = "x86_64-unknown-linux-gnu";
const STEPS: &[&str] = &[
    "asan-prep",
    "asan-reference",
    "asan-kernels",
    "asan-fuzz",
    "tsan-prep",
];

/// ThreadSanitizer reports inside std's synchronisation (channels, `Once`, `Mutex`, thread
/// start and join), rayon's latches and registry and crossbeam's deques, whose std parts are not
/// instrumented here (no `-Zbuild-std`): without these every run reports a dozen races there,
/// none of them in this project's code. A race with any of these on either stack goes unseen.
const TSAN_SUPPRESSIONS: &str = "\
race:std::sys::sync::
race:std::sync::
race:std::thread::
race:rayon_core::latch::
race:rayon_core::sleep::
race:rayon_core::registry::
race:crossbeam_epoch::
race:crossbeam_deque::
race:test::
";

/// The prep tests that run on several threads (name filters of `cargo test`).
const THREADED: &[&str] = &[
    "split",
    "striped",
    "prep_images",
    "batch",
    "concurrent",
    "parallel",
];

fn target_base(repo_root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo_root.join("target"),
    }
}

/// `cargo` with a sanitizer's flags and its own target directory.
fn sanitized_cargo(repo_root: &Path, step: &str, sanitizer: &str) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(repo_root)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", {
            // ThreadSanitizer is an ABI-changing flag that std (not rebuilt here) lacks: rustc
            // refuses the mix unless told it is wanted
            let mismatch = match sanitizer {
                "thread" => " -Cunsafe-allow-abi-mismatch=sanitizer",
                _ => "",
            };
            format!(
                "-Zsanitizer={sanitizer} -Cdebug-assertions=on -Cforce-frame-pointers=yes{mismatch}"
            )
        })
        .env("CARGO_TARGET_DIR", target_base(repo_root).join(step))
        // rav1d built with debug assertions captures a backtrace per tracked borrow when
        // backtraces are on: its AVIF tests then take tens of minutes
        .env("RUST_LIB_BACKTRACE", "0")
        .env("RUST_TEST_THREADS", "2");
    c
}

fn run_step(repo_root: &Path, step: &str) -> anyhow::Result<bool> {
    let status = match step {
        "asan-prep" => sanitized_cargo(repo_root, step, "address")
            .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
            // (not the doctests: rustdoc links them without the sanitizer's runtime)
            .args([
                "test",
                "-p",
                "glm5v-prep",
                "--release",
                "--no-fail-fast",
                "--lib",
            ])
            .args(["--tests"])
            .args(["--target", TARGET])
            .status(),
        "asan-reference" => sanitized_cargo(repo_root, step, "address")
            .env("ASAN_OPTIONS", "detect_leaks=1")
            .args(["test", "--release", "--no-fail-fast", "--target", TARGET])
            .args(["-p", "glm5v-reference", "--test", "embed_images"])
            .args(["--test", "weights_errors", "--test", "upstream_tiny"])
            .args(["-p", "glm5v-conformance", "--test", "concurrency"])
            .args(["--", "--skip", "one_segment_of_32000_patches_runs"])
            .status(),
        // the kernels' unit tests (f32 panels, AVX512-BF16, AMX emulated where there is no
        // unit, the attention's softmax in intrinsics): the crate's unsafe loads and stores;
        // built in asan-reference's directory (the same flags)
        "asan-kernels" => sanitized_cargo(repo_root, "asan-reference", "address")
            .env("ASAN_OPTIONS", "detect_leaks=1")
            .args(["test", "--release", "--no-fail-fast", "--target", TARGET])
            .args(["-p", "glm5v-reference", "--lib", "--", "kernels::"])
            .status(),
        "asan-fuzz" => return replay_corpora(repo_root),
        "tsan-prep" => {
            let supp = target_base(repo_root).join("tsan-suppressions.txt");
            std::fs::create_dir_all(target_base(repo_root)).context("creating the target dir")?;
            std::fs::write(&supp, TSAN_SUPPRESSIONS).context("writing the TSan suppressions")?;
            let mut c = sanitized_cargo(repo_root, step, "thread");
            c.env(
                "TSAN_OPTIONS",
                format!("halt_on_error=0 suppressions={}", supp.display()),
            )
            .args(["test", "--release", "--target", TARGET])
            .args(["-p", "glm5v-prep", "-p", "glm5v-conformance"])
            .args(["--lib", "--test", "batch", "--test", "concurrency", "--"]);
            c.args(THREADED);
            c.status()
        }
        other => bail!(
            "unknown sanitize step `{other}` (steps: {})",
            STEPS.join(", ")
        ),
    }
    .with_context(|| format!("running cargo for {step}"))?;
    Ok(status.success())
}

/// Runs every fuzz target once over its corpus and seeds (cargo-fuzz builds with ASan).
fn replay_corpora(repo_root: &Path) -> anyhow::Result<bool> {
    let mut ok = true;
    for t in crate::fuzz::TARGETS {
        let dirs: Vec<String> = [format!("fuzz/corpus/{t}"), format!("fuzz/corpus/seed/{t}")]
            .into_iter()
            .filter(|d| repo_root.join(d).is_dir())
            .collect();
        if dirs.is_empty() {
            continue;
        }
        println!("== sanitize asan-fuzz: {t} over {}", dirs.join(" "));
        let status = Command::new("cargo")
            .current_dir(repo_root)
            .env("RUSTC_BOOTSTRAP", "1")
            .env("RUST_LIB_BACKTRACE", "0") // as `cargo xtask fuzz` runs them
            .args(["fuzz", "run", t])
            .args(crate::fuzz::target_dir_args())
            .args(&dirs)
            .args(["--", "-runs=0", "-rss_limit_mb=4096", "-timeout=60"])
            .status()
            .context("running cargo fuzz (is cargo-fuzz installed? `cargo install cargo-fuzz`)")?;
        ok &= status.success();
    }
    Ok(ok)
}

/// Runs the steps (all when `steps` is empty), one after the other, and prints one table.
pub fn run(repo_root: &Path, steps: &[String]) -> anyhow::Result<bool> {
    let steps: Vec<String> = if steps.is_empty() {
        STEPS.iter().map(|s| s.to_string()).collect()
    } else {
        steps.to_vec()
    };
    if let Some(s) = steps.iter().find(|s| !STEPS.contains(&s.as_str())) {
        bail!("unknown sanitize step `{s}` (steps: {})", STEPS.join(", "));
    }
    let mut rows = Vec::new();
    for s in &steps {
        println!("== sanitize {s}");
        let t0 = Instant::now();
        let ok = run_step(repo_root, s)?;
        rows.push((s.clone(), t0.elapsed().as_secs_f64(), ok));
    }
    println!("\n| step | seconds (build included) | result |");
    println!("| --- | --- | --- |");
    for (s, secs, ok) in &rows {
        println!(
            "| {s} | {secs:.0} | {} |",
            if *ok { "pass" } else { "FAIL" }
        );
    }
    Ok(rows.iter().all(|r| r.2))
}
