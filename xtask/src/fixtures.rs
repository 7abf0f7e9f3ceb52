//! `fixtures --check`: the committed upstream fixtures still match the manifests their generators wrote.
//!
//! Every `fixtures/<set>/MANIFEST.json` (written by `fixtures/scripts/manifest.py`) reads
//!
//! ```json
//! { "generator": "fixtures/scripts/gen_prep.py",
//!   "scripts":   { "<repo-relative path>": "<sha256>", ... },
//!   "versions":  { "<package>": "<version>", ... },
//!   "files":     { "<set-relative path>": "<sha256>", ... } }
//! ```
//!
//! [`check`] verifies, for each set: every script hash (a generator edited since the data was made
//! means the data is stale), that the pinned upstream versions ([`PINS`]) are the ones recorded,
//! every listed file's sha256, and that the folder holds no file the manifest does not list.
//! A folder under `fixtures/` without a manifest may hold only tooling (`*.py`, `*.md`, such as
//! `scripts/`); one holding anything else is reported. All mismatches are collected and reported
//! together, one line each, naming the file.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The upstream versions fixtures must be generated with (`shared/UPSTREAM.md`); the same table as
/// `PINS` in `fixtures/scripts/manifest.py`. Other packages a manifest records are informational.
pub const PINS: &[(&str, &str)] = &[
    ("transformers", "5.23.0"),
    ("torch", "2.15.0"),
    ("torchvision", "0.29.2"),
    ("pillow", "13.0.0"),
];

/// The name of a set's manifest file.
pub const MANIFEST: &str = "MANIFEST.json";

/// File extensions a folder without a manifest may hold (generator tooling, not data).
const TOOLING: &[&str] = &["py", "md"];

/// What a successful check covered.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub sets: Vec<SetSummary>,
}

/// One verified fixture set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetSummary {
    /// The folder name under `fixtures/`.
    pub name: String,
    /// Data files whose sha256 matched.
    pub files: usize,
    /// Total size of those files.
    pub bytes: u64,
    /// Generator scripts whose sha256 matched.
    pub scripts: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.sets {
            writeln!(
                f,
                "fixtures/{}: {} files ({:.1} MB) and {} scripts match {}",
                s.name,
                s.files,
                s.bytes as f64 / 1e6,
                s.scripts,
                MANIFEST
            )?;
        }
        Ok(())
    }
}

/// Checks every fixture set under `repo_root/fixtures`. Fails with every mismatch listed, one per line.
pub fn check(repo_root: &Path) -> Result<Summary> {
    let fixtures = repo_root.join("fixtures");
    let entries =
        fs::read_dir(&fixtures).with_context(|| format!("cannot read {}", fixtures.display()))?;
    let mut names = Vec::new();
    let mut problems = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read {}", fixtures.display()))?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().join(MANIFEST).exists() {
            names.push(name);
            continue;
        }
        // No manifest: tooling only, or it is data nobody can verify.
        let mut files = Vec::new();
        walk(&entry.path(), &entry.path(), &mut files)?;
        let data: Vec<&String> = files
            .iter()
            .filter(|f| !TOOLING.iter().any(|ext| f.ends_with(&format!(".{ext}"))))
            .collect();
        if let Some(first) = data.first() {
            problems.push(format!(
                "fixtures/{name}: holds data ({} files, e.g. {first}) but no {MANIFEST}: regenerate the set",
                data.len()
            ));
        }
    }
    names.sort();
    if names.is_empty() && problems.is_empty() {
        bail!(
            "no fixture sets (fixtures/*/{MANIFEST}) under {}",
            fixtures.display()
        );
    }

    let mut summary = Summary::default();
    for name in &names {
        match check_set(repo_root, name) {
            Ok(set) => summary.sets.push(set),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "fixtures are out of date with their manifests:\n{}",
            problems.join("\n")
        );
    }
    Ok(summary)
}

/// Checks one set, `repo_root/fixtures/<name>`. Fails with all of its mismatches, one per line.
pub fn check_set(repo_root: &Path, name: &str) -> Result<SetSummary> {
    let set_dir = repo_root.join("fixtures").join(name);
    let manifest_path = set_dir.join(MANIFEST);
    let shown = format!("fixtures/{name}/{MANIFEST}");
    let text = fs::read_to_string(&manifest_path).with_context(|| {
        format!("fixtures/{name}: no readable {MANIFEST} (every data folder needs one; regenerate the set)")
    })?;
    let manifest: Value =
        serde_json::from_str(&text).with_context(|| format!("{shown}: not valid JSON"))?;

    let mut problems = Vec::new();
    let generator = manifest.get("generator").and_then(Value::as_str);
    let scripts = string_map(&manifest, "scripts", &shown, &mut problems);
    let versions = string_map(&manifest, "versions", &shown, &mut problems);
    let files = string_map(&manifest, "files", &shown, &mut problems);

    match generator {
        None => problems.push(format!("{shown}: \"generator\" is missing or not a string")),
        Some(g) if !scripts.iter().any(|(p, _)| p == g) => {
            problems.push(format!("{shown}: generator {g} is not among \"scripts\""))
        }
        Some(_) => {}
    }

    // Scripts: repo-relative.
    for (path, want) in &scripts {
        match safe_join(repo_root, path) {
            Err(e) => problems.push(format!("{shown}: script {path:?}: {e}")),
            Ok(full) => match sha256_file(&full) {
                Err(e) => problems.push(format!("script {path}: {e:#}")),
                Ok((have, _)) if have != *want => problems.push(format!(
                    "script {path} changed since fixtures/{name} was generated \
                     (sha256 {have}, manifest says {want}): rerun it"
                )),
                Ok(_) => {}
            },
        }
    }

    // Versions: each pin must be recorded as pinned.
    for (package, pin) in PINS {
        match versions.iter().find(|(p, _)| p == package) {
            None => problems.push(format!(
                "{shown}: no version recorded for {package} (pinned {pin})"
            )),
            Some((_, v)) if v != pin => problems.push(format!(
                "{shown}: generated with {package} {v}, but {package} is pinned at {pin}"
            )),
            Some(_) => {}
        }
    }

    // Files: set-relative, each hash matches.
    let mut bytes = 0u64;
    let mut listed = BTreeSet::new();
    for (path, want) in &files {
        listed.insert(path.clone());
        match safe_join(&set_dir, path) {
            Err(e) => problems.push(format!("{shown}: file {path:?}: {e}")),
            Ok(full) => match sha256_file(&full) {
                Err(e) => problems.push(format!("fixtures/{name}/{path}: listed but {e:#}")),
                Ok((have, _)) if have != *want => problems.push(format!(
                    "fixtures/{name}/{path}: sha256 {have}, manifest says {want}"
                )),
                Ok((_, len)) => bytes += len,
            },
        }
    }

    // Nothing unlisted.
    let mut present = Vec::new();
    if let Err(e) = walk(&set_dir, &set_dir, &mut present) {
        problems.push(format!("fixtures/{name}: {e:#}"));
    }
    for rel in present {
        if rel != MANIFEST && !listed.contains(&rel) {
            problems.push(format!(
                "fixtures/{name}/{rel}: not listed in {MANIFEST} (remove it or regenerate)"
            ));
        }
    }

    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(SetSummary {
        name: name.to_string(),
        files: files.len(),
        bytes,
        scripts: scripts.len(),
    })
}

/// `manifest[key]` as (string, string) pairs; a problem is recorded if it is missing or ill-typed.
fn string_map(
    manifest: &Value,
    key: &str,
    shown: &str,
    problems: &mut Vec<String>,
) -> Vec<(String, String)> {
    let Some(obj) = manifest.get(key).and_then(Value::as_object) else {
        problems.push(format!("{shown}: {key:?} is missing or not an object"));
        return Vec::new();
    };
    let mut out = Vec::with_capacity(obj.len());
    for (k, v) in obj {
        match v.as_str() {
            Some(s) => out.push((k.clone(), s.to_string())),
            None => problems.push(format!("{shown}: {key}.{k} is not a string")),
        }
    }
    out
}

/// `base/rel` for a relative, forward-slash path that stays inside `base`.
fn safe_join(base: &Path, rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if rel.is_empty() || rel.contains('\\') {
        return Err("not a forward-slash relative path".into());
    }
    for c in p.components() {
        match c {
            Component::Normal(_) => {}
            _ => return Err("must be relative and must not contain '.' or '..'".into()),
        }
    }
    Ok(base.join(p))
}

/// Hex sha256 and length of a file, streamed.
fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut f = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex(&hasher.finalize()), len))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every non-directory entry under `dir` (skipping `__pycache__/`), as forward-slash paths
/// relative to `root`.
fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            // Python's bytecode cache (git-ignored) appears wherever a generator imports from.
            if entry.file_name() == "__pycache__" {
                continue;
            }
            walk(root, &path, out)?;
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("walked path is under its root");
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scratch directory removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "xtask-fixtures-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn sha(data: &[u8]) -> String {
        hex(&Sha256::digest(data))
    }

    fn write(path: &Path, data: &[u8]) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, data).unwrap();
    }

    /// A repo with one valid set `demo`: a generator script and two data files.
    fn valid_repo() -> TempDir {
        let t = TempDir::new();
        let root = &t.0;
        write(
            &root.join("fixtures/scripts/gen_demo.py"),
            b"print('demo')\n",
        );
        write(&root.join("fixtures/demo/a.bin"), b"alpha");
        write(&root.join("fixtures/demo/sub/b.bin"), b"beta");
        let manifest = serde_json::json!({
            "generator": "fixtures/scripts/gen_demo.py",
            "scripts": {"fixtures/scripts/gen_demo.py": sha(b"print('demo')\n")},
            "versions": {"transformers": "5.23.0", "torch": "2.15.0", "torchvision": "0.29.2",
                         "pillow": "13.0.0", "numpy": "2.4.6"},
            "files": {"a.bin": sha(b"alpha"), "sub/b.bin": sha(b"beta")},
        });
        write(
            &root.join("fixtures/demo/MANIFEST.json"),
            manifest.to_string().as_bytes(),
        );
        t
    }

    fn edit_manifest(root: &Path, f: impl FnOnce(&mut Value)) {
        let path = root.join("fixtures/demo/MANIFEST.json");
        let mut v: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        fs::write(&path, v.to_string()).unwrap();
    }

    fn err(root: &Path) -> String {
        format!("{:#}", check(root).expect_err("check should fail"))
    }

    #[test]
    fn valid_set_passes_and_is_summarised() {
        let t = valid_repo();
        let s = check(&t.0).unwrap();
        assert_eq!(
            s.sets,
            vec![SetSummary {
                name: "demo".into(),
                files: 2,
                bytes: 9,
                scripts: 1
            }]
        );
        assert!(s.to_string().contains("fixtures/demo: 2 files"));
    }

    #[test]
    fn changed_data_file_is_named() {
        let t = valid_repo();
        write(&t.0.join("fixtures/demo/sub/b.bin"), b"BETA");
        let e = err(&t.0);
        assert!(e.contains("fixtures/demo/sub/b.bin: sha256"), "{e}");
        assert!(!e.contains("a.bin"), "{e}");
    }

    #[test]
    fn missing_and_unlisted_files_are_named() {
        let t = valid_repo();
        fs::remove_file(t.0.join("fixtures/demo/a.bin")).unwrap();
        write(&t.0.join("fixtures/demo/sub/stray.png"), b"x");
        let e = err(&t.0);
        assert!(
            e.contains("fixtures/demo/a.bin: listed but cannot open"),
            "{e}"
        );
        assert!(e.contains("fixtures/demo/sub/stray.png: not listed"), "{e}");
    }

    #[test]
    fn edited_script_is_named() {
        let t = valid_repo();
        write(
            &t.0.join("fixtures/scripts/gen_demo.py"),
            b"print('changed')\n",
        );
        let e = err(&t.0);
        assert!(
            e.contains("script fixtures/scripts/gen_demo.py changed"),
            "{e}"
        );
    }

    #[test]
    fn unpinned_or_missing_versions_are_named() {
        let t = valid_repo();
        edit_manifest(&t.0, |v| {
            v["versions"]["torch"] = "2.11.0".into();
            v["versions"].as_object_mut().unwrap().remove("pillow");
        });
        let e = err(&t.0);
        assert!(
            e.contains("generated with torch 2.11.0, but torch is pinned at 2.15.0"),
            "{e}"
        );
        assert!(e.contains("no version recorded for pillow"), "{e}");
        assert!(
            !e.contains("numpy"),
            "informational versions are not checked: {e}"
        );
    }

    #[test]
    fn escaping_paths_and_bad_structure_are_rejected() {
        let t = valid_repo();
        edit_manifest(&t.0, |v| {
            v["files"]["../outside"] = "00".into();
            v["generator"] = "fixtures/scripts/other.py".into();
        });
        let e = err(&t.0);
        assert!(e.contains("file \"../outside\""), "{e}");
        assert!(
            e.contains("generator fixtures/scripts/other.py is not among"),
            "{e}"
        );

        let t = valid_repo();
        fs::write(t.0.join("fixtures/demo/MANIFEST.json"), "{not json").unwrap();
        assert!(err(&t.0).contains("not valid JSON"));
    }

    #[test]
    fn data_folder_without_manifest_fails_but_tooling_folder_passes() {
        let t = valid_repo();
        write(&t.0.join("fixtures/upstream/dump.py"), b"print()\n");
        write(&t.0.join("fixtures/upstream/README.md"), b"tools\n");
        write(
            &t.0.join("fixtures/upstream/__pycache__/dump.cpython-311.pyc"),
            b"\0",
        );
        write(&t.0.join("fixtures/demo/__pycache__/x.pyc"), b"\0");
        assert_eq!(check(&t.0).unwrap().sets.len(), 1);
        write(&t.0.join("fixtures/other/sub/x.bin"), b"x");
        let e = err(&t.0);
        assert!(
            e.contains("fixtures/other: holds data (1 files, e.g. sub/x.bin) but no MANIFEST.json"),
            "{e}"
        );
        assert!(!e.contains("fixtures/upstream"), "{e}");
    }

    /// The committed prep set (generated by `fixtures/scripts/gen_prep.py`) matches its manifest.
    #[test]
    fn committed_prep_set_matches_its_manifest() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let s = check_set(root, "prep").unwrap_or_else(|e| panic!("{e:#}"));
        assert!(s.files > 50, "{s:?}");
    }
}
