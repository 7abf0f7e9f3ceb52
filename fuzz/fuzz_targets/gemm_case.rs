//! The CPU `Linear` kernels of `reference/src/kernels/` against a naive f64 product, on
//! fuzzer-chosen shapes (around the tiles, panels and summation chunks), strides and special
//! values (subnormals, huge values, values near f32's largest, +-0, NaN, infinities).
//!
//! Input: byte 0 picks the kernel (modulo 8): 0 the f32 panels (`panel::Panels`, f32 storage),
//! 1 the same with a bf16-exact weight (the panels' bf16 storage), 2 the skinny kernel, 3
//! `gemm::linear` (the skinny kernel or the `gemm` crate, x through any strides), 4 `vdpbf16ps`
//! (`dpbf16::Bf16Panels`), 5 AMX bf16 (`amx::Parts::One`), 6 AMX split-f32 (`Parts::Three`,
//! bf16-exact weight), 7 `LinearWeight` (`new` or `new_bf16`, whichever kernel it picks on this
//! CPU) through `apply_add_into` with a strided x. Byte 1: bit 0 two threads, bit 1 inside a
//! `team::with_team`, bit 2 a bias, bit 3 a residual, bits 4-5 x's layout (contiguous, a column
//! window of a wider array, column-major, every other row), bit 6 the weight packed from a
//! transposed view, bit 7 `new_bf16` for kernel 7. Bytes 2-4: m, k, n from lists of edge sizes
//! (`M`, `K`, `N`), byte 5 the value classes' mix; the rest seeds the values.
//! A kernel this CPU (or `GLM5V_CPU_ISA`) does not run is skipped, but for AMX: without the
//! unit, kernels 5 and 6 run `AmxWeight::linear_emulated` (the unit path's packing, blocking and
//! summation chunks, each 32 x 32 tile block's sums computed in f64 from the packed bf16 values,
//! within the same bound), and
//! kernel 6 checks the split its inputs go through (`amx::split3`: three bf16 values summing to
//! x) on every CPU.
//!
//! The bound, per output y = sum_j x_j w_j + b + r (the residual added last), with S = sum_j
//! |x_j w_j| + |b| + |r| over the values the kernel multiplies, u = 2^-24 and
//! gamma(d) = d u / (1 - d u):
//! - f32 kernels: |y~ - y| <= gamma(d) S + d 2^-149, d the most roundings any term meets:
//!   k + 3 for the skinny kernel and the `gemm` crate (any order), and for the blocked kernels
//!   (panels, vdpbf16ps, AMX; chunks of at most 512 inputs summed from zero, each chunk's sum
//!   then added to the running value) 512 + ceil(k / 256) + 3, capped at k + 3. That is the
//!   classical bound for any summation tree of depth d (Higham, ch. 3 and 4; a fused multiply-add
//!   rounds once), plus one subnormal spacing per rounding for underflow; a dropped, repeated
//!   or misplaced term breaks it unless the term is under the bound.
//! - bf16 kernels (4, 5, `new_bf16`): x and w rounded to bf16 first (to nearest even, by the
//!   `half` crate here, not the kernels' rounding), then the f32 bound on those values, plus what
//!   `vdpbf16ps` / `tdpbf16ps` flush: they treat bf16 subnormal inputs as zero and flush
//!   subnormal results (DAZ / FTZ whatever MXCSR says), so each product with a subnormal factor
//!   may be lost (its |x_j w_j| is allowed) and each rounding may lose up to 2^-126.
//! - split-f32 (6): the f32 bound of the panels, plus what the split loses: x = hi + mid + lo
//!   exactly for |x| >= 2^-102 (checked, and within 2^-134 below), and a part that is a bf16
//!   subnormal is flushed by the tiles, so |x_j - kept parts| |w_j| is allowed too (all of
//!   |x_j w_j| for a subnormal w_j).
//!
//! The reference is the f64 sum of the exact f64 products (its own error, k 2^-53 S, is added).
//! Outputs whose reference is NaN must be NaN, +-inf the same infinity; finite outputs are
//! checked against the bound when S <= 2^120 (no partial sum can overflow); above that only
//! that nothing panics.
//!
//! The check itself; `gemm.rs` is the cargo-fuzz target calling it, and
//! `reference/tests/fuzz_gemm.rs` replays the committed findings and seeds through it.

use glm5v_reference::kernels::{amx, dpbf16, gemm, panel, skinny, team};
use ndarray::{Array1, Array2, ArrayView2, s};
use std::sync::OnceLock;

/// Row counts: around the register tile (6), AMX's 16 / 32, the panel row block (72), the
/// skinny limit (96) and the panel's L2 block (288).
const M: [usize; 32] = [
    1, 2, 3, 5, 6, 7, 11, 12, 13, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 71, 72, 73, 95, 96,
    97, 143, 144, 145, 287, 288, 289,
];
/// Inputs: around AMX's step (32), the panels' L1 pass (64), the chunks (256, 512) and odd.
const K: [usize; 32] = [
    1, 2, 3, 4, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 511, 512,
    513, 767, 768, 769, 1023, 1024, 1025, 1537, 2049,
];
/// Outputs: around AMX's tiles (16, 32) and the panels (64).
const N: [usize; 24] = [
    1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 95, 96, 97, 127, 128, 129, 191, 192,
    193,
];
/// At most this many multiply-adds per execution (keeps the naive reference fast).
const MAX_MACS: usize = 1 << 21;

fn pool(n: usize) -> &'static rayon::ThreadPool {
    static POOLS: [OnceLock<rayon::ThreadPool>; 2] = [OnceLock::new(), OnceLock::new()];
    POOLS[n - 1].get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    })
}

/// xorshift64*, seeded from the input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// One value of a class picked by `mix` (a byte: which special classes are likely).
fn value(rng: &mut Rng, mix: u8) -> f32 {
    let r = rng.next();
    let sign = if r & 1 == 0 { 1.0 } else { -1.0 };
    let unit = ((r >> 11) & 0xff_ffff) as f32 / (1u32 << 24) as f32; // [0, 1)
    let class = (r >> 40) as u8;
    // mostly ordinary values; `mix` makes one special class frequent
    let special = class < 48 || (class < 96 && mix & 1 == 1);
    if !special {
        return sign * (0.5 + unit) * 2f32.powi(((r >> 48) % 8) as i32 - 4);
    }
    let pick = if mix & 2 == 2 {
        (mix >> 2) % 10
    } else {
        (r >> 52) as u8 % 10
    };
    match pick {
        0 => 0.0 * sign,
        // f32 subnormals (also bf16's: the same exponent range)
        1 => sign * f32::from_bits(1 + ((r >> 20) as u32 & 0x7f_ffff)),
        // the smallest normals, whose bf16 split has subnormal parts
        2 => sign * f32::MIN_POSITIVE * (1.0 + unit) * 2f32.powi(((r >> 56) % 24) as i32),
        // huge
        3 => sign * (1.0 + unit) * 2f32.powi(60 + ((r >> 56) % 40) as i32),
        // near f32's largest (above bf16's largest finite value, 3.3895e38)
        4 => sign * f32::from_bits(0x7f7f_8000 + ((r >> 24) as u32 & 0x7fff)),
        // tiny but normal
        5 => sign * (1.0 + unit) * 2f32.powi(-100 + ((r >> 56) % 20) as i32),
        // exactly bf16 (halfway cases of the rounding come from 6 with low bits 0x8000)
        6 => f32::from_bits((r >> 16) as u32 & 0xffff_0000 | ((r as u32 & 1) << 15)),
        7 if mix & 0x80 == 0x80 => f32::NAN,
        8 if mix & 0x80 == 0x80 => sign * f32::INFINITY,
        _ => sign * unit,
    }
}

thread_local! {
    static STRICT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn bf16(v: f32) -> f32 {
    half::bf16::from_f32(v).to_f32()
}

fn is_sub(v: f32) -> bool {
    v != 0.0 && v.abs() < f32::MIN_POSITIVE
}

/// Which bound a kernel meets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// f32 values, summation depth `k + 3`.
    F32Any,
    /// f32 values, blocked summation.
    F32Blocked,
    /// bf16-rounded inputs, blocked, DAZ / FTZ.
    Bf16,
    /// AMX's three-part f32 product.
    Split3,
}

/// The values one output's check needs.
struct Want {
    value: f64,
    bound: f64,
    /// S (over the finite products) above 2^120, where a partial sum can overflow, or an
    /// infinity times a flushed subnormal: only a NaN reference is checked.
    unchecked: bool,
}

#[allow(clippy::too_many_arguments)]
fn reference(
    mode: Mode,
    x: &Array2<f32>,
    w: &Array2<f32>,
    b: Option<&Array1<f32>>,
    r: Option<&Array2<f32>>,
    i: usize,
    o: usize,
) -> Want {
    let k = x.ncols();
    let u = 2f64.powi(-24);
    let depth = match mode {
        Mode::F32Any => k + 3,
        _ => (512 + k.div_ceil(256) + 3).min(k + 3),
    } as f64;
    let gamma = depth * u / (1.0 - depth * u);
    let (mut sum, mut s, mut lost) = (0f64, 0f64, 0f64);
    let mut unreliable = false;
    for j in 0..k {
        let (xv, wv) = (x[[i, j]], w[[o, j]]);
        let (xe, we) = match mode {
            Mode::Bf16 => (bf16(xv), bf16(wv)),
            _ => (xv, wv),
        };
        let p = xe as f64 * we as f64;
        sum += p;
        let flushed = match mode {
            Mode::Bf16 => is_sub(xe) || is_sub(we),
            Mode::Split3 => {
                is_sub(we) || amx::split3(xv).iter().any(|&h| is_sub(amx::bf16_value(h)))
            }
            _ => false,
        };
        if p.is_finite() {
            s += p.abs();
        } else if flushed {
            // an infinity times a flushed subnormal: NaN in the kernel, an infinity here
            unreliable = true;
        }
        match mode {
            Mode::Bf16 if flushed => lost += p.abs(),
            Mode::Split3 if xv.is_finite() => {
                // what the tiles multiply: the parts that are not bf16 subnormals
                let kept: f64 = amx::split3(xv)
                    .iter()
                    .map(|&h| amx::bf16_value(h))
                    .filter(|v| !is_sub(*v))
                    .map(|v| v as f64)
                    .sum();
                lost += if is_sub(we) {
                    p.abs()
                } else {
                    (xv as f64 - kept).abs() * (we as f64).abs()
                };
            }
            _ => {}
        }
    }
    if let Some(b) = b {
        sum += b[o] as f64;
        s += (b[o] as f64).abs();
    }
    if let Some(r) = r {
        sum += r[[i, o]] as f64;
        s += (r[[i, o]] as f64).abs();
    }
    let tiny = match mode {
        Mode::F32Any | Mode::F32Blocked => 2f64.powi(-149),
        Mode::Bf16 | Mode::Split3 => 2f64.powi(-126),
    };
    Want {
        value: sum,
        bound: gamma * s + depth * tiny + lost + (k as f64 + 2.0) * 2f64.powi(-53) * s,
        unchecked: s > 2f64.powi(120) || unreliable,
    }
}

fn check_outputs(
    what: &str,
    mode: Mode,
    x: &Array2<f32>,
    w: &Array2<f32>,
    b: Option<&Array1<f32>>,
    r: Option<&Array2<f32>>,
    y: &[f32],
) {
    let (m, n) = (x.nrows(), w.nrows());
    assert_eq!(y.len(), m * n);
    for i in 0..m {
        for o in 0..n {
            let got = y[i * n + o];
            let want = reference(mode, x, w, b, r, i, o);
            let at = format!("{what}: m={m} k={} n={n}, y[{i}][{o}]", x.ncols());
            if want.value.is_nan() {
                assert!(got.is_nan(), "{at} = {got}, the reference is NaN");
            } else if want.unchecked {
            } else if want.value.is_infinite() {
                assert!(
                    got as f64 == want.value,
                    "{at} = {got}, the reference is {}",
                    want.value
                );
            } else {
                let err = (got as f64 - want.value).abs();
                assert!(
                    err <= want.bound,
                    "{at} = {got:e}, the reference {:e}: error {err:e} over the bound {:e}",
                    want.value,
                    want.bound
                );
            }
        }
    }
}

/// `x` `[m, k]` in one of four layouts, as a view into storage the caller keeps.
fn layout(x: &Array2<f32>, how: u8, store: &mut Array2<f32>) -> (usize, usize, usize, usize) {
    let (m, k) = x.dim();
    match how % 4 {
        1 => {
            *store = Array2::from_elem((m, k + 3), -7.0);
            store.slice_mut(s![.., 3..]).assign(x);
            (0, m, 3, k + 3)
        }
        2 => {
            *store = x.t().to_owned(); // [k, m], read transposed
            (0, 0, 0, 0)
        }
        3 => {
            *store = Array2::from_elem((2 * m, k), 9.0);
            store.slice_mut(s![..;2, ..]).assign(x);
            (0, 2 * m, 0, k)
        }
        _ => {
            *store = x.clone();
            (0, m, 0, k)
        }
    }
}

fn view_of(store: &Array2<f32>, how: u8) -> ArrayView2<'_, f32> {
    match how % 4 {
        1 => store.slice(s![.., 3..]),
        2 => store.t(),
        3 => store.slice(s![..;2, ..]),
        _ => store.view(),
    }
}

/// One execution of the `gemm` fuzz target: panics when an output is outside its bound.
pub fn check(data: &[u8]) {
    check_with(
        data,
        std::env::var("GLM5V_FUZZ_STRICT").as_deref() == Ok("1"),
    )
}

/// [`check`]; `strict` also checks the inputs of pending findings (none pending: G1 is fixed).
pub fn check_with(data: &[u8], strict: bool) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let c = glm5v_reference::kernels::isa::choice();
        eprintln!(
            "gemm fuzz: kernels at {} (hardware {}): panels {}, skinny {}, vdpbf16ps {}, AMX {}",
            c.isa.name(),
            c.hardware.name(),
            panel::available(),
            skinny::available(),
            dpbf16::available(),
            amx::available()
        );
    });
    STRICT.set(strict);
    let at = |i: usize| data.get(i).copied().unwrap_or(0);
    let (kernel, flags) = (at(0) % 8, at(1));
    let (mut m, k, n) = (
        M[at(2) as usize % M.len()],
        K[at(3) as usize % K.len()],
        N[at(4) as usize % N.len()],
    );
    while m > 1 && m * k * n > MAX_MACS {
        m = m.div_ceil(2);
    }
    let mix = at(5);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for &d in data.iter().skip(6).take(64) {
        seed = (seed ^ d as u64).wrapping_mul(0x100_0000_01b3);
    }
    let mut rng = Rng(seed | 1);
    // The first values come from the input itself where it is long enough (the fuzzer's
    // mutations reach them directly), the rest from the generator.
    let mut direct = data.iter().skip(70).copied();
    let mut gen_value =
        |rng: &mut Rng| match (direct.next(), direct.next(), direct.next(), direct.next()) {
            (Some(a), Some(b), Some(c), Some(d)) => f32::from_le_bytes([a, b, c, d]),
            _ => value(rng, mix),
        };
    let x = Array2::from_shape_fn((m, k), |_| gen_value(&mut rng));
    let mut w = Array2::from_shape_fn((n, k), |_| gen_value(&mut rng));
    let b = (flags & 4 == 4).then(|| Array1::from_shape_fn(n, |_| value(&mut rng, mix)));
    let r = (flags & 8 == 8).then(|| Array2::from_shape_fn((m, n), |_| value(&mut rng, mix)));
    if matches!(kernel, 1 | 6) {
        w.mapv_inplace(amx::round_bf16);
    }
    // the weight, maybe packed from a transposed view
    let wt = w.t().to_owned();
    let wv = if flags & 64 == 64 { wt.t() } else { w.view() };
    let threads = 1 + (flags & 1) as usize;
    let xs = x.as_slice().expect("standard layout");
    let (bs, rs) = (
        b.as_ref().map(|b| b.as_slice().unwrap()),
        r.as_ref().map(|r| r.as_slice().unwrap()),
    );
    let mut y = vec![f32::from_bits(0x7fc0_dead); m * n];
    let run = |f: &mut (dyn FnMut() + Send)| {
        pool(threads).install(|| {
            if flags & 2 == 2 {
                team::with_team(f)
            } else {
                f()
            }
        })
    };
    let (what, mode): (&str, Mode) = match kernel {
        0 | 1 => {
            if !panel::available() {
                return;
            }
            let p = panel::Panels::pack(wv);
            if kernel == 1 && std::env::var("GLM5V_CPU_PANELS_BF16").as_deref() != Ok("0") {
                assert!(p.is_bf16(), "a bf16-exact weight is stored as f32");
            }
            run(&mut || match rs {
                Some(rs) => p.linear_add_into(xs, m, bs, rs, &mut y),
                None => p.linear_into(xs, m, bs, &mut y),
            });
            (
                if kernel == 0 {
                    "panels f32"
                } else {
                    "panels bf16-stored"
                },
                Mode::F32Blocked,
            )
        }
        2 => {
            if !skinny::available() {
                return;
            }
            let ws = w.as_slice().unwrap();
            let ran =
                pool(threads).install(|| skinny::linear_skinny_f32(xs, ws, bs, &mut y, m, k, n));
            assert!(ran, "the skinny kernel is available but did not run");
            check_outputs("skinny", Mode::F32Any, &x, &w, b.as_ref(), None, &y);
            return;
        }
        3 => {
            let mut store = Array2::zeros((0, 0));
            layout(&x, flags >> 4, &mut store);
            let xv = view_of(&store, flags >> 4);
            assert!(
                xv.iter()
                    .zip(x.iter())
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
            let par = if flags & 1 == 1 {
                gemm::Par::Pool
            } else {
                gemm::Par::Seq
            };
            let out =
                pool(threads).install(|| gemm::linear(xv, wv, b.as_ref().map(|b| b.view()), par));
            check_outputs(
                "gemm::linear",
                Mode::F32Any,
                &x,
                &w,
                b.as_ref(),
                None,
                out.as_slice().unwrap(),
            );
            return;
        }
        4 => {
            if !dpbf16::available() {
                return;
            }
            let p = dpbf16::Bf16Panels::pack(wv);
            run(&mut || p.linear(xs, m, bs, rs, &mut y));
            ("vdpbf16ps", Mode::Bf16)
        }
        5 | 6 => {
            let parts = if kernel == 5 {
                amx::Parts::One
            } else {
                amx::Parts::Three
            };
            if kernel == 6 {
                check_split(&x);
            }
            let Some(a) = amx::AmxWeight::pack(wv, kernel == 5) else {
                // the split-f32 product takes finite bf16-exact weights only (finding G2)
                assert!(
                    kernel == 6 && w.iter().any(|v| !v.is_finite()),
                    "a finite bf16-exact weight packs"
                );
                return;
            };
            let on_unit = amx::available();
            if on_unit {
                run(&mut || a.linear(xs, m, bs, rs, &mut y, parts));
            } else {
                // the same packing, blocking and chunks, each tile block emulated
                let chunk = amx::summation_chunk(parts);
                run(&mut || a.linear_emulated(xs, m, bs, rs, &mut y, parts, chunk, amx::order()));
            }
            match (kernel, on_unit) {
                (5, true) => ("amx bf16", Mode::Bf16),
                (5, false) => ("amx bf16 (emulated)", Mode::Bf16),
                (_, true) => ("amx split-f32", Mode::Split3),
                (_, false) => ("amx split-f32 (emulated)", Mode::Split3),
            }
        }
        _ => {
            let lw = if flags & 128 == 128 {
                gemm::LinearWeight::new_bf16(w.clone())
            } else {
                gemm::LinearWeight::new(w.clone())
            };
            let mut store = Array2::zeros((0, 0));
            layout(&x, flags >> 4, &mut store);
            let xv = view_of(&store, flags >> 4);
            let par = if flags & 1 == 1 {
                gemm::Par::Pool
            } else {
                gemm::Par::Seq
            };
            run(&mut || {
                lw.apply_add_into(
                    xv,
                    b.as_ref().map(|b| b.view()),
                    r.as_ref().map(|r| r.view()),
                    par,
                    &mut y,
                )
            });
            let mode = match (flags & 128 == 128, lw.kernel()) {
                (true, _) => Mode::Bf16,
                (false, "amx") => Mode::Split3,
                (false, "panels") => Mode::F32Blocked,
                (false, _) => Mode::F32Any,
            };
            (lw.kernel(), mode)
        }
    };
    check_outputs(what, mode, &x, &w, b.as_ref(), r.as_ref(), &y);
}

/// Without AMX: the split-f32 product's input split, `x = hi + mid + lo` with each part a bf16
/// value, for every finite x the split can hold.
fn check_split(x: &Array2<f32>) {
    for &v in x.iter() {
        let [hi, mid, lo] = amx::split3(v);
        let (h, mi, l) = (
            amx::bf16_value(hi),
            amx::bf16_value(mid),
            amx::bf16_value(lo),
        );
        if v.is_nan() {
            assert!(h.is_nan(), "split3({v}) = {h}, {mi}, {l}");
            continue;
        }
        if v.is_infinite() {
            assert!(
                h == v && mi == 0.0 && l == 0.0,
                "split3({v}) = {h}, {mi}, {l}"
            );
            continue;
        }
        let sum = h as f64 + mi as f64 + l as f64;
        // exact where every part is a normal bf16 value or zero; below, within half of bf16's
        // subnormal spacing (2^-133)
        let err = (sum - v as f64).abs();
        let limit = if v.abs() >= 2f32.powi(-102) {
            0.0
        } else {
            2f64.powi(-134)
        };
        assert!(
            err <= limit,
            "split3({v:e}) = {h:e} + {mi:e} + {l:e} = {sum:e}, {err:e} from x"
        );
    }
}
