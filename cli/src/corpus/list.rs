//! The inputs of a corpus run: paths, directories (recursive, by image extension, in name
//! order), `@LIST` files of paths (one a line; `@-` for standard input) and data URIs.

use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::path::Path;

/// File extensions a directory walk takes (lower case): the formats `glm5v prep` reads.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "png", "apng", "jpg", "jpeg", "jpe", "jfif", "mpo", "webp", "gif", "bmp", "dib", "tif", "tiff",
    "avif", "avifs", "jp2", "j2k", "jpc", "jpf", "jpx", "j2c", "qoi", "ppm", "pgm", "pbm", "pnm",
    "pfm", "tga", "ico", "icns", "cur", "dds", "psd", "sgi", "rgb", "rgba", "bw", "pcx", "dcx",
    "ras", "xbm", "xpm", "msp", "im", "fits", "fit", "blp", "fli", "flc", "ftc", "ftu", "gbr",
    "pcd", "pxr",
];

fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// Every input, in order: arguments as given, a directory replaced by its images.
pub fn expand(args: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stdin_used = false;
    for a in args {
        if let Some(list) = a.strip_prefix('@') {
            let lines: Vec<String> = if list == "-" {
                if stdin_used {
                    bail!("@- given twice: standard input can be read once");
                }
                stdin_used = true;
                let stdin = std::io::stdin();
                read_lines(stdin.lock()).context("reading the input list from standard input")?
            } else {
                let f = std::fs::File::open(list)
                    .with_context(|| format!("cannot read the input list {list}"))?;
                read_lines(std::io::BufReader::new(f))
                    .with_context(|| format!("cannot read the input list {list}"))?
            };
            out.extend(lines);
        } else if !a.starts_with("data:") && Path::new(a).is_dir() {
            let before = out.len();
            walk(Path::new(a), &mut out).with_context(|| format!("cannot list {a}"))?;
            if out.len() == before {
                eprintln!(
                    "glm5v: warning: {a} holds no image files (by extension: png, jpg, webp, gif, tiff, avif, ...)"
                );
            }
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

fn read_lines(r: impl BufRead) -> std::io::Result<Vec<String>> {
    let mut v = Vec::new();
    for line in r.lines() {
        let line = line?;
        let t = line.trim_end_matches('\r');
        if !t.trim().is_empty() {
            v.push(t.to_string());
        }
    }
    Ok(v)
}

/// Image files under `dir`, depth first, entries in name order; symbolic links to folders are
/// not followed (no loops).
fn walk(dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let ty = e.file_type()?;
        if ty.is_dir() {
            walk(&path, out)?;
        } else if (ty.is_file() || (ty.is_symlink() && path.is_file())) && is_image(&path) {
            out.push(path.display().to_string());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_expand_in_name_order_and_lists_are_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        for f in ["b/2.PNG", "b/1.jpg", "a.webp", "notes.txt", "c.tiff"] {
            std::fs::write(d.path().join(f), b"x").unwrap();
        }
        let list = d.path().join("list.txt");
        std::fs::write(&list, "one.png\n\n  \ntwo.jpg\r\n").unwrap();
        let dir = d.path().display().to_string();
        let got = expand(&[
            format!("@{}", list.display()),
            dir.clone(),
            "data:image/png;base64,AA".into(),
        ])
        .unwrap();
        let rel: Vec<String> = got
            .iter()
            .map(|p| p.strip_prefix(&format!("{dir}/")).unwrap_or(p).to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "one.png",
                "two.jpg",
                "a.webp",
                "b/1.jpg",
                "b/2.PNG",
                "c.tiff",
                "data:image/png;base64,AA"
            ]
        );
        assert!(expand(&["@/no/such/list".into()]).is_err());
    }
}
