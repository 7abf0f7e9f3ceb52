//! `bench writer`: the corpus dataset's writing alone. `--count` rows of a 672x448 photo's
//! embeddings (384 merged tokens x 4096, 6 MiB in f32) through the Parquet dataset writer that
//! `glm5v embed --out X.parquet` uses (row groups encoded on its pool, appended and fsynced by
//! its writer thread), in f32 and bf16, each turn beside a plain write of the same bytes into one
//! file with its fsync: the disk's own rate, which the dataset can at best approach. No upstream
//! counterpart (upstream's loop keeps its results in memory): the figures stand alone, and say
//! whether a GPU's rows (1.5 GB/s of f32 from an H100 on the corpus bench's photos) can be
//! written as fast as they come.

use super::Args;
use crate::corpus::dataset::{Dataset, Dtype, Row};
use anyhow::{Context, Result, bail};
use glm5v_reference::synth::Preset;
use ndarray::{ArcArray2, Array2};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

const TOKENS: usize = 384;

fn dataset_write(dir: &Path, rows: usize, e: &ArcArray2<f32>, dtype: Dtype) -> Result<f64> {
    let out = dir.join("bench.parquet");
    let start = Instant::now();
    let (mut ds, _) = Dataset::open(&out, &[], 1000, true, dtype)?;
    for i in 0..rows {
        ds.push(Row {
            input: format!("photo_{i:05}.png"),
            error: None,
            grid_thw: Some([1, 32, 48]),
            tokens: Some(TOKENS),
            shape: Some([TOKENS, e.ncols()]),
            embedding: Some(e.clone()),
            stamp: (i as u64, 0),
        })?;
    }
    ds.finish()?;
    let secs = start.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&out).with_context(|| format!("cannot remove {}", out.display()))?;
    Ok(secs)
}

fn plain_write(dir: &Path, rows: usize, bytes: &[u8]) -> Result<f64> {
    let out = dir.join("bench.bin");
    let start = Instant::now();
    let mut f =
        std::fs::File::create(&out).with_context(|| format!("cannot write {}", out.display()))?;
    let what = || format!("cannot write {}", out.display());
    for _ in 0..rows {
        f.write_all(bytes).with_context(what)?;
    }
    f.sync_all().with_context(what)?;
    drop(f);
    let secs = start.elapsed().as_secs_f64();
    std::fs::remove_file(&out).with_context(|| format!("cannot remove {}", out.display()))?;
    Ok(secs)
}

pub fn bench_writer(args: &Args, dir: &Path) -> Result<()> {
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let hidden = Preset::Full.config().out_hidden_size;
    let e = Array2::from_shape_fn((TOKENS, hidden), |(r, c)| {
        ((r * 131 + c) as f32 * 0.01).sin()
    })
    .into_shared();
    let f32_bytes: Vec<u8> = e.iter().flat_map(|x| x.to_le_bytes()).collect();
    let bf16_bytes: Vec<u8> = e
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
        .collect();
    let mut times: Vec<(&str, Dtype, Vec<f64>)> = vec![
        ("Parquet dataset", Dtype::F32, vec![]),
        ("plain file", Dtype::F32, vec![]),
        ("Parquet dataset", Dtype::Bf16, vec![]),
        ("plain file", Dtype::Bf16, vec![]),
    ];
    for turn in 0..args.turns.max(1) {
        for (what, dtype, t) in times.iter_mut() {
            let secs = if *what == "plain file" {
                let bytes = if *dtype == Dtype::F32 {
                    &f32_bytes
                } else {
                    &bf16_bytes
                };
                plain_write(dir, args.count, bytes)?
            } else {
                dataset_write(dir, args.count, &e, *dtype)?
            };
            eprintln!("bench writer: turn {turn}: {what} {dtype:?} {secs:.2} s");
            t.push(secs);
        }
    }
    println!(
        "writer: {} rows of {TOKENS} x {hidden} (a 672x448 photo's embeddings) into {}, {} turns; {} ({} cores)",
        args.count,
        dir.display(),
        args.turns.max(1),
        super::batcher::cpu_name(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("| writer | dtype | GB | seconds median (range) | GB/s |");
    println!("| --- | --- | --- | --- | --- |");
    for (what, dtype, t) in times {
        let gb = (args.count * TOKENS * hidden * dtype.size()) as f64 / 1e9;
        let (lo, hi) = t
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let med = super::median(t);
        println!(
            "| {what} | {} | {gb:.2} | {med:.2} ({:.2}-{:.2}) | {:.2} |",
            if dtype == Dtype::F32 { "f32" } else { "bf16" },
            lo,
            hi,
            gb / med
        );
    }
    Ok(())
}
