//! Running commands and finding things.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `<root>/target`).
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() { d } else { root.join(d) }
        }
        None => root.join("target"),
    }
}

/// `cargo` as the one running us.
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs `cmd`, echoing its stdout line by line, and returns (success, stdout lines).
pub fn run_tee(mut cmd: Command) -> Result<(bool, Vec<String>)> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: $ {}", shown.replace('"', ""));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {shown}"))?;
    let mut lines = Vec::new();
    let out = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(out).lines() {
        let line = line.context("reading the command's output")?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait()?;
    Ok((status.success(), lines))
}

/// Runs `cmd` with inherited output; its success.
pub fn run_status(mut cmd: Command) -> Result<bool> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: $ {}", shown.replace('"', ""));
    Ok(cmd
        .status()
        .with_context(|| format!("cannot run {shown}"))?
        .success())
}
