//! Times `prep_images` on a PNG alone and on a batch of copies of it prepared at once, for the
//! keep-or-cut measurement of the two-thread inflate (issue 26, item 4). Run it twice, with and
//! without `GLM5V_PREP_SPLIT_INFLATE=0`, alternating, e.g.:
//!
//! ```text
//! cargo build --release -p glm5v-prep --example split_inflate_ab
//! for i in 1 2 3; do
//!   target/release/examples/split_inflate_ab screen_640x480.png 200 8
//!   GLM5V_PREP_SPLIT_INFLATE=0 target/release/examples/split_inflate_ab screen_640x480.png 200 8
//! done
//! ```
//!
//! Arguments: the PNG, calls per measurement (default 200), images in the batch (default 8).
//! Prints one line: the switch, then median / min / max milliseconds of one image's prep and of
//! the batch's.

use glm5v_prep::{ImageSource, PrepOptions, prep_images};
use std::time::Instant;

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "median {:.3} ms (min {:.3}, max {:.3})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: split_inflate_ab IMAGE.png [CALLS] [BATCH]");
        std::process::exit(2);
    };
    let calls: usize = args
        .get(1)
        .map_or(200, |s| s.parse().expect("CALLS: a number"));
    let batch: usize = args
        .get(2)
        .map_or(8, |s| s.parse().expect("BATCH: a number"));
    let bytes = std::fs::read(path).expect("reading the image");
    let src = ImageSource::Bytes {
        name: path.clone(),
        bytes,
    };
    let opts = PrepOptions::default();
    let many = vec![src.clone(); batch];
    let time = |srcs: &[ImageSource]| {
        let t0 = Instant::now();
        let b = prep_images(srcs, &opts).expect("the image prepares");
        std::hint::black_box(&b);
        t0.elapsed().as_secs_f64() * 1e3
    };
    // warm-up (thread pool, per-thread buffers, page faults)
    for _ in 0..10 {
        time(std::slice::from_ref(&src));
        time(&many);
    }
    let (mut one, mut all) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        one.push(time(std::slice::from_ref(&src)));
        all.push(time(&many));
    }
    let switch = std::env::var("GLM5V_PREP_SPLIT_INFLATE").unwrap_or_else(|_| "1".into());
    println!(
        "split {}: one image {}; batch of {batch} {}",
        if switch == "0" { "off" } else { "on " },
        stats(one),
        stats(all)
    );
}
