//! `cargo xtask mutants-lite`: the suite can fail. Applies deliberate one-line mistakes to the CPU
//! reference (in a scratch copy of the tree, never here), rebuilds `glm5v`, and checks that the
//! tower fixtures (`glm5v conformance --suite tower`) fail for each one. On demand, not in CI:
//! each mutant is a release rebuild of the reference and the binary.

use crate::util::{cargo, repo_root, target_dir};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::{Command, Stdio};

struct Mutant {
    name: &'static str,
    file: &'static str,
    from: &'static str,
    to: &'static str,
}

const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "rope theta x2",
        file: "reference/src/cpu.rs",
        from: "cfg.rope_parameters.rope_theta)",
        to: "cfg.rope_parameters.rope_theta * 2.0)",
    },
    Mutant {
        name: "RMS norm eps x100",
        file: "reference/src/cpu.rs",
        from: "let eps = cfg.rms_norm_eps;",
        to: "let eps = cfg.rms_norm_eps * 100.0;",
    },
    Mutant {
        name: "block swiglu limit x0.9",
        file: "reference/src/cpu.rs",
        from: "F::from_f64(cfg.swiglu_limit), mv.view_mut()); // [N, I]",
        to: "F::from_f64(cfg.swiglu_limit * 0.9), mv.view_mut()); // [N, I]",
    },
    Mutant {
        name: "clamp sign (up < -L -> +L)",
        file: "reference/src/kernels/act.rs",
        from: "} else if up < -limit {\n        -limit",
        to: "} else if up < -limit {\n        limit",
    },
    Mutant {
        name: "q/k norm after rope",
        file: "reference/src/kernels/rope.rs",
        from: "        super::norm::norm_group_any(x, w, a.eps, head);\n        if let Some(keep) = keep.as_deref_mut() {\n            keep[h * hd..(h + 1) * hd].copy_from_slice(head);\n        }\n        rotate(head, a.cos, a.sin, &mut out[h * hd..(h + 1) * hd]);",
        to: "        let mut rot = vec![F::ZERO; hd];\n        rotate(x, a.cos, a.sin, &mut rot);\n        super::norm::norm_group_any(&rot, w, a.eps, head);\n        if let Some(keep) = keep.as_deref_mut() {\n            keep[h * hd..(h + 1) * hd].copy_from_slice(head);\n        }\n        out[h * hd..(h + 1) * hd].copy_from_slice(head);",
    },
    Mutant {
        name: "row-major rope positions",
        file: "reference/src/geometry.rs",
        from: "frame.push([bh * merge + ih, bw * merge + iw]);",
        to: "let p = frame.len(); frame.push([p / w, p % w]);",
    },
    Mutant {
        name: "GELU tanh instead of erf",
        file: "reference/src/kernels/act.rs",
        from: "half * x * (F::ONE + (x * frac_1_sqrt_2).erf())",
        to: "{ let _ = frac_1_sqrt_2; let z = F::from_f64(0.7978845608028654) * (x + F::from_f64(0.044715) * x * x * x); half * x * (F::ONE + (F::ONE - F::from_f64(2.0) / ((z + z).exp() + F::ONE))) }",
    },
    Mutant {
        name: "LayerNorm eps 1e-5 -> 1e-3",
        file: "reference/src/cpu.rs",
        from: "w.norm_b.view(), 1e-5);",
        to: "w.norm_b.view(), 1e-3);",
    },
    Mutant {
        name: "segment leakage (one segment per batch)",
        file: "reference/src/geometry.rs",
        from: "        for _ in 0..t {\n            cu.push(cu.last().unwrap() + h * w);\n        }",
        to: "        let last = *cu.last().unwrap();\n        if cu.len() > 1 {\n            cu.pop();\n        }\n        cu.push(last + t * h * w);",
    },
];

/// Copies the tree (no target/, .git/, out/, fuzz/target/) into `dst`.
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src).with_context(|| format!("cannot read {}", src.display()))? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if matches!(n.as_ref(), "target" | ".git" | "out") {
            continue;
        }
        let (s, d) = (e.path(), dst.join(&name));
        if e.file_type()?.is_dir() {
            copy_tree(&s, &d)?;
        } else if e.file_type()?.is_file() {
            std::fs::copy(&s, &d).with_context(|| format!("cannot copy {}", s.display()))?;
        }
    }
    Ok(())
}

enum Outcome {
    Killed(String),
    Survived,
    BuildFailed,
    NotApplied,
}

pub fn run(args: &[String]) -> Result<bool> {
    if !args.is_empty() {
        bail!("usage: cargo xtask mutants-lite");
    }
    let root = repo_root();
    let work = target_dir(&root).join("mutants-lite");
    let tree = work.join("tree");
    let target = work.join("target");
    let _ = std::fs::remove_dir_all(&tree);
    copy_tree(&root, &tree)?;
    eprintln!(
        "xtask: mutants-lite: scratch tree {}, target {}",
        tree.display(),
        target.display()
    );

    let build = || -> Result<bool> {
        let mut c = cargo();
        c.current_dir(&tree).env("CARGO_TARGET_DIR", &target).args([
            "build",
            "--release",
            "-p",
            "glm5v",
        ]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        Ok(c.status()?.success())
    };
    // Ok(None) = passed, Ok(Some(first divergence)) = failed
    let conformance = || -> Result<Option<String>> {
        let json = work.join("summary.json");
        let _ = std::fs::remove_file(&json);
        let status = Command::new(target.join("release").join("glm5v"))
            .current_dir(&tree)
            .args(["conformance", "--suite", "tower", "--summary-json"])
            .arg(&json)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            return Ok(None);
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
                .unwrap_or_default();
        let first = v["fixtures"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["status"] == "fail")
            .map(|f| {
                format!(
                    "{}: {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["first_divergence"]
                        .as_str()
                        .unwrap_or(f["detail"].as_str().unwrap_or("?"))
                )
            })
            .unwrap_or_else(|| "failed".into());
        Ok(Some(first))
    };

    eprintln!("xtask: baseline (no mutation)");
    if !build()? {
        bail!("the unmutated tree does not build");
    }
    if let Some(f) = conformance()? {
        bail!("the unmutated tree fails the tower fixtures ({f}): nothing to learn from mutants");
    }
    let mut rows = Vec::new();
    for m in MUTANTS {
        eprintln!("xtask: mutant: {}", m.name);
        let path = tree.join(m.file);
        let original = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let outcome = if original.matches(m.from).count() != 1 {
            Outcome::NotApplied
        } else {
            std::fs::write(&path, original.replacen(m.from, m.to, 1))?;
            let o = if !build()? {
                Outcome::BuildFailed
            } else {
                match conformance()? {
                    Some(f) => Outcome::Killed(f),
                    None => Outcome::Survived,
                }
            };
            std::fs::write(&path, &original)?;
            o
        };
        eprintln!("xtask: mutant: {}: {}", m.name, describe(m, &outcome).0);
        rows.push((m, outcome));
    }
    println!("\n{:<42} {:<10} detail", "mutant", "result");
    let mut killed = 0;
    for (m, o) in &rows {
        let (r, d) = describe(m, o);
        if matches!(o, Outcome::Killed(_)) {
            killed += 1;
        }
        println!("{:<42} {r:<10} {d}", m.name);
    }
    println!("\nkilled {killed} of {} mutants", rows.len());
    Ok(killed == rows.len())
}

fn describe(m: &Mutant, o: &Outcome) -> (&'static str, String) {
    match o {
        Outcome::Killed(f) => ("killed", format!("first divergence {f}")),
        Outcome::Survived => ("SURVIVED", "the tower fixtures still pass".into()),
        Outcome::BuildFailed => ("ERROR", "the mutated tree does not build".into()),
        Outcome::NotApplied => (
            "ERROR",
            format!(
                "the line to mutate is not (once) in {}: update the list",
                m.file
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mutant whose text has left its file would report an error instead of testing anything.
    #[test]
    fn every_mutant_applies_to_the_tree_exactly_once() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace");
        for m in MUTANTS {
            let text = std::fs::read_to_string(root.join(m.file)).expect("the mutant's file");
            assert_eq!(
                text.matches(m.from).count(),
                1,
                "mutant {:?} in {}",
                m.name,
                m.file
            );
        }
    }
}
