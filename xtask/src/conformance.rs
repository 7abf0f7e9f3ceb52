//! `cargo xtask conformance`: every check the project has, one summary table at the end.

use crate::util::{cargo, repo_root, run_status, run_tee, target_dir};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The outcome of `fixtures --check`.
pub struct FixturesCheck {
    pub ok: bool,
    /// One line for the summary table.
    pub line: String,
}

/// Verifies every committed fixture set against its manifest ([`crate::fixtures::check`]), printing
/// what it found.
pub fn fixtures_check(root: &Path) -> Result<FixturesCheck> {
    eprintln!("xtask: fixtures --check");
    Ok(match crate::fixtures::check(root) {
        Ok(summary) => {
            print!("{summary}");
            let files: usize = summary.sets.iter().map(|s| s.files).sum();
            let line = format!(
                "{} sets, {files} files match their manifests",
                summary.sets.len()
            );
            FixturesCheck { ok: true, line }
        }
        Err(e) => {
            println!("{e:#}");
            let first = format!("{e:#}")
                .lines()
                .nth(1)
                .unwrap_or("see above")
                .to_string();
            FixturesCheck {
                ok: false,
                line: format!("mismatch: {first}"),
            }
        }
    })
}

/// Totals of `cargo test` output.
#[derive(Default, Debug, PartialEq)]
struct TestTotals {
    suites: usize,
    passed: usize,
    failed: usize,
    ignored: usize,
}

fn parse_test_output(lines: &[String]) -> TestTotals {
    let mut t = TestTotals::default();
    for l in lines {
        // "test result: ok. 18 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"
        let Some(rest) = l.trim().strip_prefix("test result: ") else {
            continue;
        };
        t.suites += 1;
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let n = |w: &[&str]| {
                w.iter()
                    .rev()
                    .nth(1)
                    .and_then(|s| s.parse::<usize>().ok())
                    .unwrap_or(0)
            };
            match words.last() {
                Some(&"passed") => t.passed += n(&words),
                Some(&"failed") => t.failed += n(&words),
                Some(&"ignored") => t.ignored += n(&words),
                _ => {}
            }
        }
    }
    t
}

struct Row {
    step: String,
    status: &'static str,
    detail: String,
    secs: f64,
}

pub fn run(args: &[String]) -> Result<bool> {
    let backend = match args {
        [] => "cpu",
        [flag] if flag == "--corpus" => return run_corpus(&repo_root()),
        [flag, b] if flag == "--backend" && (b == "cpu" || b == "gpu") => b.as_str(),
        _ => bail!("usage: cargo xtask conformance [--backend cpu|gpu | --corpus]"),
    };
    let root = repo_root();
    let mut rows: Vec<Row> = Vec::new();
    let mut ok = true;

    // 1. committed fixtures match their manifests
    let t0 = Instant::now();
    let f = fixtures_check(&root)?;
    ok &= f.ok;
    rows.push(Row {
        step: "fixtures --check".into(),
        status: if f.ok { "pass" } else { "FAIL" },
        detail: f.line,
        secs: t0.elapsed().as_secs_f64(),
    });

    // 1b. no source file of ours over the size limit (cheap: counts lines)
    let t0 = Instant::now();
    let t = crate::tree::check(&root)?;
    ok &= t.ok;
    rows.push(Row {
        step: "tree".into(),
        status: if t.ok { "pass" } else { "FAIL" },
        detail: t.line,
        secs: t0.elapsed().as_secs_f64(),
    });

    // 2. the workspace tests, in release (the full-geometry tests need it; one build serves step 3)
    let t0 = Instant::now();
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .args(["test", "--workspace", "--release", "--no-fail-fast"]);
    let (tests_ok, lines) = run_tee(cmd)?;
    let totals = parse_test_output(&lines);
    ok &= tests_ok;
    rows.push(Row {
        step: "cargo test --workspace --release".into(),
        status: if tests_ok { "pass" } else { "FAIL" },
        detail: format!(
            "{} suites, {} passed, {} failed, {} ignored{}",
            totals.suites,
            totals.passed,
            totals.failed,
            totals.ignored,
            if tests_ok || totals.failed > 0 {
                ""
            } else {
                " (build failed)"
            }
        ),
        secs: t0.elapsed().as_secs_f64(),
    });

    // 3. glm5v conformance: every prep and tower fixture through the built binary
    let t0 = Instant::now();
    let mut build = cargo();
    build
        .current_dir(&root)
        .args(["build", "--release", "-p", "glm5v"]);
    let mut fixture_summary: Option<Value> = None;
    if run_status(build)? {
        let bin = target_dir(&root).join("release").join("glm5v");
        let json_path = target_dir(&root).join("xtask-conformance.json");
        let _ = std::fs::remove_file(&json_path);
        let mut cmd = Command::new(&bin);
        cmd.current_dir(&root).args([
            "conformance",
            "--backend",
            backend,
            "--fixtures",
            "fixtures",
            "--summary-json",
        ]);
        cmd.arg(&json_path);
        let passed = run_status(cmd)?;
        ok &= passed;
        let detail = match std::fs::read_to_string(&json_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        {
            Some(v) => {
                let d = fixture_line(&v);
                fixture_summary = Some(v);
                d
            }
            None => "no summary written (see the output above)".into(),
        };
        rows.push(Row {
            step: format!("glm5v conformance --backend {backend}"),
            status: if passed { "pass" } else { "FAIL" },
            detail,
            secs: t0.elapsed().as_secs_f64(),
        });
    } else {
        ok = false;
        rows.push(Row {
            step: "cargo build --release -p glm5v".into(),
            status: "FAIL",
            detail: "build failed".into(),
            secs: t0.elapsed().as_secs_f64(),
        });
    }

    print_summary(&rows, fixture_summary.as_ref(), ok);
    Ok(ok)
}

/// `--corpus`: the Pillow 13.0.0 corpus suite (`conformance/tests/corpus.rs`). Fetches the sdist
/// that `fixtures/corpus/corpus.json` names into `<target>/corpus/` when it is absent (`pip
/// download` from PyPI, with `$GLM5V_PYTHON` or `python3`), checks its sha256, unpacks its test
/// images once (`tar`), then runs the suite's test in release with `GLM5V_CORPUS_DIR` set.
fn run_corpus(root: &Path) -> Result<bool> {
    let t0 = Instant::now();
    let manifest = root.join("fixtures/corpus/corpus.json");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", manifest.display()))?;
    let field = |k: &str| -> Result<String> {
        v["sdist"][k]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("{}: no sdist.{k}", manifest.display()))
    };
    let (requirement, file, want) = (field("requirement")?, field("file")?, field("sha256")?);
    let images_root = v["root"]
        .as_str()
        .with_context(|| format!("{}: no root", manifest.display()))?
        .to_string();
    let dir = target_dir(root).join("corpus");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let sdist = dir.join(&file);
    if !sdist.exists() {
        let python = std::env::var_os("GLM5V_PYTHON").unwrap_or_else(|| "python3".into());
        let mut pip = Command::new(python);
        pip.args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "pillow",
        ])
        .arg(&requirement)
        .arg("-d")
        .arg(&dir);
        if !run_status(pip)? || !sdist.exists() {
            bail!(
                "could not download {requirement} ({file}) from PyPI into {}",
                dir.display()
            );
        }
    }
    let have = sha256_file(&sdist)?;
    if have != want {
        bail!(
            "{}: sha256 {have}, corpus.json says {want}: delete it and rerun",
            sdist.display()
        );
    }
    let stamp = dir.join(format!(".unpacked-{want}"));
    let images = dir.join(&images_root);
    if !stamp.exists() {
        let _ = std::fs::remove_dir_all(dir.join(images_root.split('/').next().unwrap_or("")));
        let mut tar = Command::new("tar");
        tar.arg("-xzf")
            .arg(&sdist)
            .arg("-C")
            .arg(&dir)
            .arg(&images_root);
        if !run_status(tar)? {
            bail!("could not unpack {images_root} from {}", sdist.display());
        }
        std::fs::write(&stamp, b"")?;
    }
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args([
            "test",
            "--release",
            "-p",
            "glm5v-conformance",
            "--test",
            "corpus",
        ])
        .args(["--", "--include-ignored", "--nocapture"])
        .env("GLM5V_CORPUS_DIR", &images);
    let (ok, lines) = run_tee(cmd)?;
    let detail = lines
        .iter()
        .find(|l| l.contains(" files in ") && l.contains("problems"))
        .cloned()
        .unwrap_or_else(|| "no summary line (see the output above)".into());
    println!(
        "\n==================== corpus summary ====================\n\
         corpus ({requirement} Tests/images)  {}  {:.1} s  {detail}\n\nresult: {}",
        if ok { "pass" } else { "FAIL" },
        t0.elapsed().as_secs_f64(),
        if ok { "PASS" } else { "FAIL" }
    );
    Ok(ok)
}

/// Hex sha256 of a file.
fn sha256_file(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn fixture_line(v: &Value) -> String {
    let fx = v["fixtures"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let count = |s: &str| fx.iter().filter(|f| f["status"] == s).count();
    let taps: u64 = fx.iter().filter_map(|f| f["taps"].as_u64()).sum();
    format!(
        "{} fixtures: {} passed, {} failed, {} skipped; {} taps compared",
        fx.len(),
        count("pass"),
        count("fail"),
        count("skipped"),
        taps
    )
}

fn print_summary(rows: &[Row], fixtures: Option<&Value>, ok: bool) {
    println!("\n==================== conformance summary ====================");
    let w = rows.iter().map(|r| r.step.len()).max().unwrap_or(4);
    for r in rows {
        println!(
            "{:<w$}  {:<5}  {:>7.1} s  {}",
            r.step, r.status, r.secs, r.detail
        );
    }
    if let Some(v) = fixtures {
        // worst error per preset, across fixtures
        let mut worst: std::collections::BTreeMap<String, (f64, f64, String)> = Default::default();
        let mut skipped = Vec::new();
        for f in v["fixtures"].as_array().into_iter().flatten() {
            let name = format!(
                "{}/{} [{}]",
                f["kind"].as_str().unwrap_or("?"),
                f["name"].as_str().unwrap_or("?"),
                f["check"].as_str().unwrap_or("")
            );
            if f["status"] == "skipped" {
                skipped.push(format!("{name}: {}", f["detail"].as_str().unwrap_or("")));
                continue;
            }
            let (Some(preset), Some(rel)) = (f["preset"].as_str(), f["worst_rel_l2"].as_f64())
            else {
                continue;
            };
            let ratio = f["worst_ratio"].as_f64().unwrap_or(f64::NAN);
            let what = format!("{name} / {}", f["worst_tap"].as_str().unwrap_or("?"));
            let e = worst
                .entry(preset.to_string())
                .or_insert((-1.0, 0.0, String::new()));
            if ratio > e.0 || e.0.is_nan() {
                *e = (ratio, rel, what);
            }
        }
        if !worst.is_empty() {
            println!("\nworst error per preset:");
            for (preset, (ratio, rel, what)) in &worst {
                println!("  {preset:<16} rel L2 {rel:.3e} ({ratio:.2} x tolerance) at {what}");
            }
        }
        if !skipped.is_empty() {
            println!("\nskipped (not passed):");
            for s in skipped {
                println!("  {s}");
            }
        }
    }
    println!("\nresult: {}", if ok { "PASS" } else { "FAIL" });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cargo_test_lines() {
        let lines: Vec<String> = [
            "running 3 tests",
            "test result: ok. 18 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "test result: FAILED. 4 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.2s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            parse_test_output(&lines),
            TestTotals {
                suites: 2,
                passed: 22,
                failed: 1,
                ignored: 2
            }
        );
    }
}
