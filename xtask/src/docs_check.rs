//! `cargo xtask docs-check`: the commands that README.md and docs/*.md mark for checking still
//! run as written.
//!
//! A fenced block is checked when its info string says so (GitHub highlights by the first word
//! and ignores the rest):
//!
//! - ```` ```sh check ````: the block runs as one `bash -euo pipefail` script in a scratch
//!   directory that links every top-level entry of the repository (so `fixtures/...` resolves and
//!   the files a command writes land in the scratch directory, which is removed afterwards).
//!   `glm5v ...` and `cargo run --release -p glm5v -- ...` both run the release binary this task
//!   builds first; any other `cargo` command in a checked block is an error (mark only cheap
//!   blocks; `cargo xtask conformance` is CI's own step).
//! - ```` ```rust check=PACKAGE:EXAMPLE ````: the block's text must appear verbatim in that
//!   package's `examples/EXAMPLE.rs`, which is then run from the repository root
//!   (`cargo run --release -p PACKAGE --example EXAMPLE`).
//! - ```` ```python check ````: the block runs with `$GLM5V_PYTHON` (default `python3`) in the
//!   scratch directory when that Python imports `glm5v`; otherwise the block is reported as
//!   skipped, with the reason.
//!
//! Blocks without `check` are counted and listed as not run. Exit: 0 when every checked block
//! ran and succeeded (skips included), 1 when one failed.

use crate::util::{cargo, repo_root, run_status, target_dir};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// One fenced block of a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// File (relative to the repository root) and the line of the opening fence (1-based).
    pub file: String,
    pub line: usize,
    /// The info string after the fence, trimmed (e.g. `sh check`).
    pub info: String,
    pub body: String,
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    /// `Some(arg)` when the info string has `check` (`arg` is what follows `check=`, or "").
    fn check(&self) -> Option<&str> {
        self.info.split_whitespace().skip(1).find_map(|w| {
            if w == "check" {
                Some("")
            } else {
                w.strip_prefix("check=")
            }
        })
    }

    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The fenced blocks of a Markdown text, in order.
pub fn blocks(file: &str, text: &str) -> Result<Vec<Block>> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    let indent = line.len() - t.len();
                    open = Some((
                        i + 1,
                        info.trim().to_string(),
                        " ".repeat(indent),
                        Vec::new(),
                    ));
                }
            }
            Some((start, info, indent, body)) => {
                if t.trim_end() == "```" {
                    out.push(Block {
                        file: file.to_string(),
                        line: *start,
                        info: std::mem::take(info),
                        body: body.join("\n") + "\n",
                    });
                    open = None;
                } else {
                    // a block inside a list item is indented as its fence is
                    body.push(line.strip_prefix(indent.as_str()).unwrap_or(line));
                }
            }
        }
    }
    if let Some((start, ..)) = open {
        bail!("{file}:{start}: a fenced block is never closed");
    }
    Ok(out)
}

/// README.md and every docs/*.md, sorted.
fn markdown_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .context("reading docs/")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    Ok(files)
}

/// The shell functions a checked `sh` block runs with.
const SH_PRELUDE: &str = r#"
glm5v() { "$GLM5V_BIN" "$@"; }
cargo() {
    if [ "$#" -ge 5 ] && [ "$1 $2 $3 $4 $5" = "run --release -p glm5v --" ]; then
        shift 5
        "$GLM5V_BIN" "$@"
    else
        echo "docs-check: a checked block may run \`cargo run --release -p glm5v -- ...\` only, not: cargo $*" >&2
        return 2
    fi
}
"#;

enum Outcome {
    Ok,
    Failed(String),
    Skipped(String),
}

pub fn run(args: &[String]) -> Result<bool> {
    let list_only = match args {
        [] => false,
        [a] if a == "--list" => true,
        _ => bail!("usage: cargo xtask docs-check [--list]"),
    };
    let root = repo_root();
    let mut all = Vec::new();
    for path in markdown_files(&root)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        all.extend(blocks(&rel, &text)?);
    }
    let checked: Vec<&Block> = all.iter().filter(|b| b.check().is_some()).collect();
    let unchecked: Vec<&Block> = all
        .iter()
        .filter(|b| b.check().is_none() && matches!(b.lang(), "sh" | "bash" | "python" | "rust"))
        .collect();
    if list_only {
        for b in &checked {
            println!("check      {} ({})", b.place(), b.info);
        }
        for b in &unchecked {
            println!("not run    {} ({})", b.place(), b.info);
        }
        return Ok(true);
    }

    let mut build = cargo();
    build
        .current_dir(&root)
        .args(["build", "--release", "-p", "glm5v"]);
    if !run_status(build)? {
        return Ok(false);
    }
    let bin = target_dir(&root).join("release").join("glm5v");
    let scratch = std::env::temp_dir().join(format!("glm5v-docs-check-{}", std::process::id()));
    let result = run_blocks(&root, &bin, &scratch, &checked);
    let _ = std::fs::remove_dir_all(&scratch);
    let outcomes = result?;

    println!("\ndocs-check: {} checked blocks", checked.len());
    let mut failed = 0;
    for (b, (outcome, secs)) in checked.iter().zip(&outcomes) {
        let (word, why) = match outcome {
            Outcome::Ok => ("ok", String::new()),
            Outcome::Failed(w) => {
                failed += 1;
                ("FAILED", format!(": {w}"))
            }
            Outcome::Skipped(w) => ("skipped", format!(": {w}")),
        };
        println!(
            "  {word:<8} {:<28} {:<32} {secs:>6.1} s{why}",
            b.place(),
            b.info
        );
    }
    println!(
        "  {} shell/python/rust blocks are not marked `check` (not run; `cargo xtask docs-check --list` names them)",
        unchecked.len()
    );
    Ok(failed == 0)
}

fn run_blocks(
    root: &Path,
    bin: &Path,
    scratch: &Path,
    checked: &[&Block],
) -> Result<Vec<(Outcome, f64)>> {
    let mut out = Vec::new();
    for b in checked {
        // a fresh scratch directory per block: no block sees another's files
        let _ = std::fs::remove_dir_all(scratch);
        link_repo(root, scratch)?;
        eprintln!("docs-check: {} ({})", b.place(), b.info);
        let t0 = Instant::now();
        let outcome = match (b.lang(), b.check().unwrap_or("")) {
            ("sh" | "bash", "") => run_sh(b, bin, scratch)?,
            ("python", "") => run_python(b, scratch)?,
            ("rust", spec) if !spec.is_empty() => run_rust_example(b, root)?,
            _ => Outcome::Failed(format!(
                "cannot check a `{}` block (sh check, python check, rust check=PACKAGE:EXAMPLE)",
                b.info
            )),
        };
        out.push((outcome, t0.elapsed().as_secs_f64()));
    }
    Ok(out)
}

/// `scratch/<entry>` -> `root/<entry>` for every top-level entry but .git and target.
fn link_repo(root: &Path, scratch: &Path) -> Result<()> {
    std::fs::create_dir_all(scratch)
        .with_context(|| format!("cannot create {}", scratch.display()))?;
    let target = target_dir(root);
    for e in std::fs::read_dir(root)? {
        let p = e?.path();
        let name = p.file_name().unwrap_or_default();
        if name == ".git" || name == "target" || p == target {
            continue;
        }
        std::os::unix::fs::symlink(&p, scratch.join(name))
            .with_context(|| format!("cannot link {} into {}", p.display(), scratch.display()))?;
    }
    Ok(())
}

fn status_outcome(status: std::process::ExitStatus) -> Outcome {
    if status.success() {
        Outcome::Ok
    } else {
        Outcome::Failed(format!("exited with {status}"))
    }
}

fn run_sh(b: &Block, bin: &Path, scratch: &Path) -> Result<Outcome> {
    let script = format!("set -euo pipefail\n{SH_PRELUDE}\n{}", b.body);
    let status = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(scratch)
        .env("GLM5V_BIN", bin)
        .status()
        .context("cannot run bash")?;
    Ok(status_outcome(status))
}

fn run_python(b: &Block, scratch: &Path) -> Result<Outcome> {
    let py = std::env::var_os("GLM5V_PYTHON").unwrap_or_else(|| "python3".into());
    let probe = Command::new(&py)
        .args(["-c", "import glm5v"])
        .current_dir(scratch)
        .output();
    match probe {
        Err(e) => {
            return Ok(Outcome::Skipped(format!(
                "no {}: {e}",
                py.to_string_lossy()
            )));
        }
        Ok(o) if !o.status.success() => {
            return Ok(Outcome::Skipped(format!(
                "{} cannot import glm5v (set GLM5V_PYTHON to a Python with the package installed)",
                py.to_string_lossy()
            )));
        }
        Ok(_) => {}
    }
    let status = Command::new(&py)
        .arg("-c")
        .arg(&b.body)
        .current_dir(scratch)
        .status()
        .with_context(|| format!("cannot run {}", py.to_string_lossy()))?;
    Ok(status_outcome(status))
}

/// The package and example a `rust check=PACKAGE:EXAMPLE` block names, once its text is found
/// verbatim in that example's file; else why not.
fn example_of<'b>(b: &'b Block, root: &Path) -> std::result::Result<(&'b str, &'b str), String> {
    let spec = b.check().unwrap_or("");
    let Some((package, example)) = spec.split_once(':') else {
        return Err(format!("check={spec}: expected check=PACKAGE:EXAMPLE"));
    };
    let dir = match package {
        "glm5v" => "cli",
        p => p.strip_prefix("glm5v-").unwrap_or(p),
    };
    let file = root
        .join(dir)
        .join("examples")
        .join(format!("{example}.rs"));
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !text.contains(b.body.trim()) {
        return Err(format!(
            "the block is not in {} verbatim (copy it there, or the block from it)",
            file.display()
        ));
    }
    Ok((package, example))
}

fn run_rust_example(b: &Block, root: &Path) -> Result<Outcome> {
    let (package, example) = match example_of(b, root) {
        Ok(pe) => pe,
        Err(why) => return Ok(Outcome::Failed(why)),
    };
    let mut cmd = cargo();
    cmd.current_dir(root).args([
        "run",
        "--release",
        "--quiet",
        "-p",
        package,
        "--example",
        example,
    ]);
    Ok(status_outcome(cmd.status().context("cannot run cargo")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_with_their_info_lines_and_bodies() {
        let md = "# t\n```sh check\nglm5v plan a.png\n```\ntext\n- item\n  ```python check\n  import glm5v\n  print(1)\n  ```\n```text\nout\n```\n";
        let b = blocks("R.md", md).unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!((b[0].line, b[0].info.as_str()), (2, "sh check"));
        assert_eq!(b[0].body, "glm5v plan a.png\n");
        assert_eq!(b[0].check(), Some(""));
        assert_eq!(b[1].body, "import glm5v\nprint(1)\n");
        assert_eq!(b[2].check(), None);
        let r = Block {
            info: "rust check=glm5v-reference:readme".into(),
            ..b[0].clone()
        };
        assert_eq!(
            (r.lang(), r.check()),
            ("rust", Some("glm5v-reference:readme"))
        );
    }

    /// The committed README and docs parse, mark at least the README's two commands for
    /// checking, and every Rust block they mark is its example's text (no build needed, so this
    /// runs with the workspace tests; `cargo xtask docs-check` runs the blocks).
    #[test]
    fn the_committed_docs_parse_and_their_rust_blocks_match_their_examples() {
        let root = repo_root();
        let mut checked = 0;
        for path in markdown_files(&root).unwrap() {
            let text = std::fs::read_to_string(&path).unwrap();
            for b in blocks(&path.display().to_string(), &text).unwrap() {
                if b.check().is_none() {
                    continue;
                }
                checked += 1;
                if b.lang() == "rust"
                    && let Err(why) = example_of(&b, &root)
                {
                    panic!("{}: {why}", b.place());
                }
            }
        }
        assert!(checked >= 2, "only {checked} blocks are marked `check`");
    }

    #[test]
    fn an_unclosed_block_is_an_error() {
        let e = blocks("R.md", "x\n```sh\nls\n").unwrap_err().to_string();
        assert!(e.contains("R.md:2"), "{e}");
    }
}
