//! `cargo xtask tree`: no source file of ours passes [`MAX_LINES`] lines (tests aside), so that
//! no file is everything at once (the house rule in shared/STYLE.md). Third-party sources
//! (`third_party/`), build outputs (`target/`, any folder whose name starts with `target`) and
//! hidden folders are skipped; a file's test module (from a top-level `#[cfg(test)]` followed
//! by `mod tests` on to the end) and files under a `tests/` folder do not count.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The most lines a non-test source file of ours may have.
pub const MAX_LINES: usize = 1200;

/// The extensions of our sources: Rust, CUDA, the Python of the package and the scripts, C glue.
const SOURCE_EXTS: [&str; 6] = ["rs", "cu", "cuh", "py", "c", "h"];

/// One source file: its path from the root and its lines outside its test module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub path: String,
    pub lines: usize,
}

pub fn run(args: &[String]) -> Result<bool> {
    if !args.is_empty() {
        anyhow::bail!("usage: cargo xtask tree");
    }
    let c = check(&crate::util::repo_root())?;
    println!("{}", c.line);
    Ok(c.ok)
}

/// The result of [`check`]: one line for the summary table.
pub struct TreeCheck {
    pub ok: bool,
    pub line: String,
}

/// Counts every source file of ours under `root` and names those over [`MAX_LINES`].
pub fn check(root: &Path) -> Result<TreeCheck> {
    let mut files = Vec::new();
    walk(root, root, &mut files)?;
    let mut counted = Vec::with_capacity(files.len());
    for p in &files {
        let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
        let rel = p.strip_prefix(root).unwrap_or(p).display().to_string();
        counted.push(Counted {
            path: rel,
            lines: non_test_lines(&text),
        });
    }
    counted.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.path.cmp(&b.path)));
    let over: Vec<&Counted> = counted.iter().filter(|c| c.lines > MAX_LINES).collect();
    let largest = counted
        .first()
        .map_or("none".to_string(), |c| format!("{} {}", c.path, c.lines));
    let line = if over.is_empty() {
        format!(
            "{} source files, none over {MAX_LINES} lines (tests aside); largest {largest}",
            counted.len()
        )
    } else {
        let names: Vec<String> = over
            .iter()
            .map(|c| format!("{} {}", c.path, c.lines))
            .collect();
        format!(
            "{} of {} source files over {MAX_LINES} lines (tests aside): {}",
            over.len(),
            counted.len(),
            names.join(", ")
        )
    };
    Ok(TreeCheck {
        ok: over.is_empty(),
        line,
    })
}

/// Whether a folder is left out: hidden, a build output, third-party sources, or test files.
fn skipped_dir(root: &Path, dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with('.')
        || name.starts_with("target")
        || name == "tests"
        || name == "node_modules"
        || name == "__pycache__"
        || dir == root.join("third_party")
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let ty = e.file_type()?;
        if ty.is_dir() {
            if !skipped_dir(root, &p) {
                walk(root, &p, out)?;
            }
        } else if ty.is_file()
            && p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| SOURCE_EXTS.contains(&x))
        {
            out.push(p);
        }
    }
    Ok(())
}

/// Lines of `text` before its test module: a top-level `#[cfg(test)]` line whose next
/// non-blank line opens `mod tests` (the module runs to the end of the file, as ours do).
pub fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_end() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty())
                .is_some_and(|n| n.starts_with("mod tests"))
        {
            return i;
        }
    }
    lines.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_module_does_not_count() {
        let src = "fn a() {}\n#[cfg(test)]\nfn only_in_tests() {}\n\n#[cfg(test)]\n\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
        // the first #[cfg(test)] is an item, not the module: it counts
        assert_eq!(non_test_lines(src), 4);
        assert_eq!(non_test_lines("a\nb\nc\n"), 3);
        assert_eq!(non_test_lines(""), 0);
    }

    #[test]
    fn third_party_targets_and_tests_are_skipped() {
        let root = std::env::temp_dir().join(format!("xtask-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let long = "x\n".repeat(MAX_LINES + 1);
        for (p, text) in [
            ("third_party/big/src/lib.rs", long.as_str()),
            ("target/release/build/gen.rs", long.as_str()),
            ("fuzz/target/x.rs", long.as_str()),
            ("prep/tests/big.rs", long.as_str()),
            ("prep/src/ok.rs", "fn a() {}\n"),
            ("docs/notes.md", long.as_str()),
        ] {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        let c = check(&root).unwrap();
        assert!(c.ok, "{}", c.line);
        assert!(c.line.starts_with("1 source files"), "{}", c.line);
        std::fs::write(root.join("gpu.cu"), &long).unwrap();
        let c = check(&root).unwrap();
        assert!(!c.ok);
        assert!(
            c.line.contains(&format!("gpu.cu {}", MAX_LINES + 1)),
            "{}",
            c.line
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
