//! The panel products against f64 sums on ragged shapes, and bit for bit against the blocked
//! sums (chunks of [`KC`] onto the bias) through every level of the blocking, the bf16
//! widening and the residual; on each tile this CPU runs (AVX-512F, AVX2 + FMA), whatever
//! `GLM5V_CPU_ISA` says, and through [`Panels::linear_into`] where the level has a tile.

use super::*;
use ndarray::Array2;

/// The tiles this CPU runs (none: the tests say so and pass).
fn tiles() -> Vec<Tile> {
    let t: Vec<Tile> = [Tile::Avx2, Tile::Avx512]
        .into_iter()
        .filter(|t| t.runs_here())
        .collect();
    if t.is_empty() {
        eprintln!("skipped: neither AVX-512F nor AVX2 + FMA on this CPU");
    }
    t
}

/// `linear_add_into` (or `linear_into`) on `tile`.
fn run(
    p: &Panels,
    tile: Tile,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    res: Option<&[f32]>,
    y: &mut [f32],
) {
    p.linear_impl(tile, x, m, bias, res, y)
}

#[test]
fn matches_f64_sums_on_ragged_shapes() {
    for tile in tiles() {
        matches_f64_sums_on(tile);
    }
}

fn matches_f64_sums_on(tile: Tile) {
    let mut lcg = crate::kernels::Lcg(5);
    let mut rnd = || lcg.unit() as f32 - 0.5;
    // ragged rows (tile edges), columns (a partial panel; on AVX2 partial quarters and
    // vectors: 5, 13, 24 and 40 columns), k over one chunk (KC)
    for (m, k, n) in [
        (1, 1, 1),
        (7, 13, 5),
        (8, 9, 13),
        (5, 30, 24),
        (11, 17, 40),
        (13, 70, 130),
        (6, KC + 37, 64),
        (20, 3, 200),
    ] {
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let w = Array2::from_shape_fn((n, k), |_| rnd());
        let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let p = Panels::pack(w.view());
        assert_eq!((p.rows(), p.cols()), (n, k));
        for bias in [Some(&b[..]), None] {
            let mut y = vec![f32::NAN; m * n];
            run(&p, tile, &x, m, bias, None, &mut y);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = bias.map_or(0.0, |b| b[j] as f64)
                        + (0..k)
                            .map(|c| x[i * k + c] as f64 * w[[j, c]] as f64)
                            .sum::<f64>();
                    let err = (y[i * n + j] as f64 - want).abs();
                    assert!(
                        err < 1e-5 * (k as f64).sqrt(),
                        "{tile:?} ({m},{k},{n}) at ({i},{j}): {} vs {want}",
                        y[i * n + j]
                    );
                }
            }
        }
    }
}

/// The level's own tile behind `linear_into` (none at `generic`): the f64 sums too.
#[test]
fn linear_into_runs_the_chosen_tile() {
    let Some(tile) = Tile::chosen() else {
        assert!(!available());
        eprintln!("skipped: no panel tile at this level");
        return;
    };
    assert!(available() && tile.runs_here());
    let (m, k, n) = (9, 40, 70);
    let x: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let w = Array2::from_shape_fn((n, k), |(j, c)| ((j + 3 * c) % 11) as f32 * 0.1 - 0.5);
    let p = Panels::pack(w.view());
    let mut y = vec![f32::NAN; m * n];
    p.linear_into(&x, m, None, &mut y);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|c| x[i * k + c] as f64 * w[[j, c]] as f64).sum();
            assert!((y[i * n + j] as f64 - want).abs() < 1e-5, "({i},{j})");
        }
    }
}

#[test]
fn sums_in_blocks_of_kc_onto_the_bias() {
    sums_in_blocks(3, 2 * KC + 5, 17, 1, false);
    sums_in_blocks(3, 2 * KC + 5, 17, 1, true);
}

/// The blocking of large products (groups of panels, row blocks of MC and RB rows,
/// sub-chunks of KS, a partial last chunk and panel) leaves the bits as they are, for 1 and
/// 2 threads (one task, 4 or 2 panels a group).
#[test]
fn blocking_keeps_the_sums_exact() {
    let (m, k, n) = (MC + RB / 2 + 5, 4 * KC + KS + 12, 15 * NP + 40);
    assert!(m * k * 4 > X_L2_BYTES, "large enough to group panels");
    sums_in_blocks(m, k, n, 2, false);
    sums_in_blocks(m, k, n, 1, true);
}

/// The bf16 sub-chunks widened ahead by the tiles of the previous one (several tiles per
/// sub-chunk, across chunk ends, a short last sub-chunk), as in the merger's 16-row
/// products and the blocks' 64-row ones.
#[test]
fn widening_ahead_keeps_the_sums_exact() {
    sums_in_blocks(16, 2 * KC + KS + 8, 70, 2, true);
    sums_in_blocks(64, 4 * KC, NP, 1, true);
}

/// `linear_add_into` = `linear_into`, then the residual added: the same bits, for a partial
/// last panel, several chunks, one chunk, and no inputs at all.
#[test]
fn residual_is_added_last() {
    for tile in tiles() {
        residual_is_added_last_on(tile);
    }
}

fn residual_is_added_last_on(tile: Tile) {
    let mut lcg = crate::kernels::Lcg(11);
    let mut rnd = || lcg.unit() as f32 - 0.5;
    for (m, k, n) in [(13, 2 * KC + 9, 70), (7, 33, 21), (6, 40, 64), (3, 0, 5)] {
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let w = Array2::from_shape_fn((n, k), |_| rnd());
        let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let res: Vec<f32> = (0..m * n).map(|_| rnd() * 8.0).collect();
        let p = Panels::pack(w.view());
        for bias in [Some(&b[..]), None] {
            let mut want = vec![f32::NAN; m * n];
            run(&p, tile, &x, m, bias, None, &mut want);
            if k == 0 {
                assert!(
                    want.iter()
                        .enumerate()
                        .all(|(i, &v)| v == bias.map_or(0.0, |b| b[i % n]))
                );
            }
            want.iter_mut().zip(&res).for_each(|(y, r)| *y += r);
            let mut y = vec![f32::NAN; m * n];
            run(&p, tile, &x, m, bias, Some(&res), &mut y);
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{tile:?} ({m},{k},{n}) value {i}");
            }
        }
    }
}

/// `short`: weights rounded to bf16 first, so the panels store them as bf16 (exactly). On
/// every tile this CPU runs; the tiles then agree bit for bit with each other too.
fn sums_in_blocks(m: usize, k: usize, n: usize, threads: usize, short: bool) {
    let tiles = tiles();
    if tiles.is_empty() {
        return;
    }
    // per chunk of KC: an fma chain from zero over kk ascending, added to the running sum
    // that starts at the bias; exactly
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
        .collect();
    let w = Array2::from_shape_fn((n, k), |(j, c)| {
        let v = ((j * 31 + c * 7) % 97) as f32 * 0.021 - 1.0;
        if short {
            f32::from_bits(v.to_bits() & 0xffff_0000)
        } else {
            v
        }
    });
    let panels = Panels::pack(w.view());
    assert_eq!(panels.is_bf16(), short);
    let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.1 - 0.7).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    let mut want = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = b[j];
            for c0 in (0..k).step_by(KC) {
                let mut part = 0.0f32;
                for c in c0..(c0 + KC).min(k) {
                    part = x[i * k + c].mul_add(w[[j, c]], part);
                }
                s += part;
            }
            want[i * n + j] = s;
        }
    }
    for tile in tiles {
        let mut y = vec![0.0f32; m * n];
        pool.install(|| run(&panels, tile, &x, m, Some(&b), None, &mut y));
        for i in 0..m {
            for j in 0..n {
                assert_eq!(
                    y[i * n + j].to_bits(),
                    want[i * n + j].to_bits(),
                    "{tile:?} ({i},{j})"
                );
            }
        }
    }
}
