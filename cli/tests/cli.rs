//! The `glm5v` binary end to end: exit codes (0 ok, 1 failed comparison, 2 usage/input error),
//! one-line errors naming the input, no partial output files, and the embed -> diff round trip
//! against upstream's committed tiny fixture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn glm5v(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("glm5v runs")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glm5v-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const TINY: &str = "fixtures/tower/tiny";

/// The image upstream's tiny dump was made from (`fixtures/tower/tiny/fixture.json`).
fn image() -> String {
    let text =
        std::fs::read_to_string(root().join(TINY).join("fixture.json")).expect("tiny fixture.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    format!(
        "fixtures/tower/{}",
        v["inputs"][0].as_str().expect("inputs[0]")
    )
}

fn other_image() -> String {
    let dir = root().join("fixtures/tower/inputs");
    let mut pngs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".png"))
        .collect();
    pngs.sort();
    let img = image();
    let n = pngs
        .into_iter()
        .find(|n| !img.ends_with(n.as_str()))
        .expect("a second input image");
    format!("fixtures/tower/inputs/{n}")
}

#[test]
fn embed_then_diff_against_upstream_passes_and_a_wrong_dump_fails() {
    let d = scratch("embed");
    let emb = d.join("emb.safetensors");
    let taps = d.join("taps.safetensors");
    let image = image();
    let o = glm5v(&[
        "embed",
        "--model",
        TINY,
        &image,
        "--out",
        emb.to_str().unwrap(),
        "--taps",
        taps.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // embeddings [tokens, out_hidden] + the grid
    let bytes = std::fs::read(&emb).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let e = st.tensor("embeddings").unwrap();
    let g = st.tensor("image_grid_thw").unwrap();
    let grid: Vec<i64> = g
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(e.shape(), &[(grid[0] * grid[1] * grid[2] / 4) as usize, 96]);
    // our taps from our prep against upstream's dump (made from upstream's processor): pass, exit 0
    let up = format!("{TINY}/taps.safetensors");
    let o = glm5v(&["diff", taps.to_str().unwrap(), &up, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["passed"], true);
    assert!(report["taps"].as_array().unwrap().len() >= 30);
    // a different dump (the packed batch) fails: different inputs, exit 1
    let o = glm5v(&[
        "diff",
        taps.to_str().unwrap(),
        "fixtures/tower/packed/taps.safetensors",
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // the plot is written
    let svg = d.join("p.svg");
    let o = glm5v(&[
        "diff",
        taps.to_str().unwrap(),
        &up,
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_inputs_exit_2_with_one_line_naming_the_input_and_leave_no_file() {
    let d = scratch("bad");
    let out = d.join("out.safetensors");
    let out_s = out.to_str().unwrap();
    let image = image();
    let image = image.as_str();
    let missing = d.join("missing.png");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["prep", image, missing.to_str().unwrap(), "--out", out_s],
            "missing.png",
        ),
        (
            vec!["embed", "--model", "no/such/model", image, "--out", out_s],
            "no/such/model",
        ),
        (
            // f64 is the CPU oracle's only (bf16 now runs on both backends)
            vec![
                "embed",
                "--model",
                TINY,
                "--backend",
                "gpu",
                "--precision",
                "f64",
                image,
                "--out",
                out_s,
            ],
            "f64",
        ),
        (
            vec!["embed", "--model", TINY, "Cargo.toml", "--out", out_s],
            "Cargo.toml",
        ),
        (
            vec!["diff", "no-such-a.safetensors", "no-such-b.safetensors"],
            "no-such-a.safetensors",
        ),
        (vec!["diff", "Cargo.toml", "Cargo.toml"], "Cargo.toml"),
        (vec!["diff", image, image, "--tolerance", "loose"], "loose"),
        (vec!["plan", "data:image/png;base64,!!!!"], "data"),
    ];
    for (args, needle) in cases {
        let o = glm5v(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("glm5v: error:"))
            .unwrap_or_else(|| panic!("{args:?}: {err}"));
        assert!(line.contains(needle), "{args:?}: {line}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} left {out_s}");
    }
    // nothing but the directory itself: no temporary files either
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    // usage errors are exit 2 too (clap)
    assert_eq!(glm5v(&["embed"]).status.code(), Some(2));
    assert_eq!(glm5v(&["frobnicate"]).status.code(), Some(2));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn plan_prints_one_json_line_per_image_and_prep_agrees() {
    let (a, b) = (image(), other_image());
    let o = glm5v(&["plan", &a, &b, "--max-image-tokens", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert!(l["tokens"].as_u64().unwrap() <= 20, "{l}");
    }
    // prep with the same budget writes the planned grids
    let d = scratch("plan");
    let out = d.join("px.safetensors");
    let o = glm5v(&[
        "prep",
        &a,
        &b,
        "--max-image-tokens",
        "20",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let g: Vec<i64> = st
        .tensor("image_grid_thw")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let planned: Vec<i64> = lines
        .iter()
        .flat_map(|l| {
            l["grid_thw"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(g, planned);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn synth_is_deterministic_and_refuses_a_non_empty_directory() {
    let d = scratch("synth");
    let a = d.join("a");
    let b = d.join("b");
    let c = d.join("c");
    let mut hashes = Vec::new();
    for (p, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let o = glm5v(&[
            "synth",
            "--out",
            p.to_str().unwrap(),
            "--preset",
            "tiny",
            "--seed",
            seed,
            "--dtype",
            "f32",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let h = out
            .lines()
            .find_map(|l| l.strip_prefix("content sha256 "))
            .expect("hash line")
            .to_string();
        hashes.push(h);
    }
    assert_eq!(hashes[0], hashes[1], "same seed, same weights");
    assert_ne!(hashes[0], hashes[2], "another seed, other weights");
    // the tensors themselves agree, tensor by tensor (the header's metadata order may differ)
    let (ba, bb) = (
        std::fs::read(a.join("model.safetensors")).unwrap(),
        std::fs::read(b.join("model.safetensors")).unwrap(),
    );
    let (sa, sb) = (
        safetensors::SafeTensors::deserialize(&ba).unwrap(),
        safetensors::SafeTensors::deserialize(&bb).unwrap(),
    );
    assert_eq!(sa.len(), sb.len());
    for (name, t) in sa.tensors() {
        assert!(
            t.data() == sb.tensor(&name).unwrap().data(),
            "{name} differs"
        );
    }
    let o = glm5v(&["synth", "--out", a.to_str().unwrap(), "--preset", "tiny"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("refusing to overwrite"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&d).unwrap();
}
