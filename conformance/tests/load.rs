//! Load (issue 6, "Load"): several hundred small images, embedded from 2 threads sharing one
//! loaded tower (the tiny checkpoint), each result equal bit for bit to a single-threaded run
//! with a 1-thread pool, and live heap bytes flat over the run (a counting global allocator:
//! live bytes after warm-up vs after the run, no growth per image).
//!
//! Release-mode test (`cargo test --release -p glm5v-conformance --test load`): in a debug
//! build it runs a short version and says so.

use glm5v_prep::{ImageSource, PrepOptions, prep_images};
use glm5v_reference::{EmbedOptions, Embedder, Grid, Precision, Threads};
use ndarray::ArrayView2;
use sha2::{Digest, Sha256};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only adds to an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as isize, Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/data/tiny")
}

/// An 8-bit RGB PNG (the png crate's encoder), so the images go through the whole decode path.
fn png_rgb(w: u32, h: u32, pixels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()
        .unwrap()
        .write_image_data(pixels)
        .unwrap();
    out
}

/// Image `i`: between 20 and 99 pixels a side, seeded noise with a gradient.
fn image(i: usize) -> ImageSource {
    let mut s = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (w, h) = (20 + next() % 80, 20 + next() % 80);
    let px: Vec<u8> = (0..w * h * 3)
        .map(|k| ((k / (w * 3)) * 2 + next() % 64) as u8)
        .collect();
    ImageSource::Bytes {
        name: format!("load_{i}_{w}x{h}.png"),
        bytes: png_rgb(w as u32, h as u32, &px),
    }
}

/// Prep + embed one image; the sha256 of the embeddings' bits (and the grid).
fn embed_one(e: &Embedder, opts: &PrepOptions, i: usize) -> ([u8; 32], Grid) {
    let b = prep_images(&[image(i)], opts).expect("prep");
    let grid: Grid = b.image_grid_thw[0].map(|v| v as usize);
    let rows = b.pixel_values.len() / b.patch_dim;
    let pv = ArrayView2::from_shape((rows, b.patch_dim), &b.pixel_values).expect("shape");
    let out = e.embed_pixels(pv, &[grid]).expect("embed");
    let emb = out.embeddings.as_standard_layout();
    let mut h = Sha256::new();
    for v in emb.iter() {
        h.update(v.to_bits().to_le_bytes());
    }
    (h.finalize().into(), grid)
}

#[test]
fn two_threads_share_one_tower_bit_for_bit_with_flat_memory() {
    let (images, warm) = if cfg!(debug_assertions) {
        println!("load test: debug build, running 40 images (run with --release for the full 400)");
        (40, 8)
    } else {
        (400, 20)
    };
    let opts = PrepOptions::default();
    let opts = &opts;

    // The single-threaded reference: its own tower, a 1-thread pool, one image at a time.
    let single = Embedder::load(
        &tiny(),
        EmbedOptions {
            precision: Precision::F32,
            threads: Threads::Count(1),
        },
    )
    .expect("tiny checkpoint");
    let reference: Vec<([u8; 32], Grid)> =
        (0..images).map(|i| embed_one(&single, opts, i)).collect();
    drop(single);
    let distinct_grids: std::collections::BTreeSet<Grid> = reference.iter().map(|r| r.1).collect();
    assert!(
        distinct_grids.len() >= 4,
        "the images should cover several grids: {distinct_grids:?}"
    );

    // One tower (rayon's global pool), shared by 2 threads.
    let shared = Embedder::load(&tiny(), EmbedOptions::default()).expect("tiny checkpoint");
    let shared = &shared;
    let barrier = Barrier::new(3);
    let barrier = &barrier;
    let t0 = std::time::Instant::now();
    let (live_warm, live_end, results) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || {
                    let mine: Vec<usize> = (t..images).step_by(2).collect();
                    let mut out: Vec<(usize, [u8; 32], Grid)> = Vec::with_capacity(mine.len());
                    // warm-up: caches, pools and thread locals settle
                    for &i in &mine[..warm / 2] {
                        let (h, g) = embed_one(shared, opts, i);
                        out.push((i, h, g));
                    }
                    barrier.wait(); // warm-up done
                    barrier.wait(); // main thread has read the live bytes
                    for &i in &mine[warm / 2..] {
                        let (h, g) = embed_one(shared, opts, i);
                        out.push((i, h, g));
                    }
                    barrier.wait(); // run done
                    barrier.wait(); // main thread has read the live bytes
                    out
                })
            })
            .collect();
        barrier.wait();
        let live_warm = LIVE.load(Relaxed);
        barrier.wait();
        barrier.wait();
        let live_end = LIVE.load(Relaxed);
        barrier.wait();
        let results: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect();
        (live_warm, live_end, results)
    });
    let secs = t0.elapsed().as_secs_f64();

    assert_eq!(results.len(), images);
    let mut mismatches = Vec::new();
    for (i, h, g) in &results {
        if (*h, *g) != reference[*i] {
            mismatches.push(*i);
        }
    }
    let measured = images - warm;
    let growth = live_end - live_warm;
    println!(
        "load test: {images} images ({} grids) from 2 threads in {secs:.2} s; live heap after warm-up {} B, \
         after the run {} B, growth {growth} B over {measured} images ({:.1} B/image)",
        distinct_grids.len(),
        live_warm,
        live_end,
        growth as f64 / measured as f64
    );
    assert!(
        mismatches.is_empty(),
        "{} results differ from the single-threaded run: {mismatches:?}",
        mismatches.len()
    );
    // Flat: well under one image's embeddings (16 tokens x 96 x 4 B = 6 KiB) over the whole run.
    assert!(
        growth < 16 * 1024,
        "live heap grew by {growth} B over {measured} images"
    );
}
