//! YUV to RGB as Pillow 13.0.0's `_avif.c` gets it from libavif 1.4.2's `avifImageYUVToRGB`
//! (8-bit RGB or RGBA, `chromaUpsampling` AUTOMATIC, alpha not premultiplied) in the wheel's
//! build, which links libyuv 1924: for 8-bit YUV with a matrix libyuv knows, the conversion is
//! libyuv's (`I4xxToRGB24MatrixFilter` / `I4xxAlphaToARGBMatrixFilter` with bilinear chroma
//! upsampling, `I444*Matrix`, `I400ToARGBMatrix`), with its 6-bit fixed-point `YuvPixel`
//! arithmetic; a 4:0:0 image without alpha is read as mode "L" through libavif's own float path;
//! a premultiplied image is un-premultiplied with libyuv's `ARGBUnattenuate` (its x86 SIMD
//! rounding). The constants and formulas are libyuv's and libavif's; the code is ours.

use super::Fail;
use super::av1::Layout;
use super::modes::Pixels;

/// libyuv's `YuvConstants` for one matrix and range: (YG, YB, UB, UG, VG, VR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Coeffs {
    yg: i32,
    yb: i32,
    ub: i32,
    ug: i32,
    vg: i32,
    vr: i32,
}

const fn k(yg: i32, yb: i32, ub: i32, ug: i32, vg: i32, vr: i32) -> Coeffs {
    Coeffs {
        yg,
        yb,
        ub,
        ug,
        vg,
        vr,
    }
}

/// BT.601 limited (`kYuvI601Constants`; UB capped at 128 as libyuv builds without
/// `LIBYUV_UNLIMITED_DATA`).
const I601: Coeffs = k(18997, -1160, 128, 25, 52, 102);
/// BT.601 full (`kYuvJPEGConstants`).
const JPEG: Coeffs = k(16320, 32, 113, 22, 46, 90);
/// BT.709 limited (`kYuvH709Constants`).
const H709: Coeffs = k(18997, -1160, 128, 14, 34, 115);
/// BT.709 full (`kYuvF709Constants`).
const F709: Coeffs = k(16320, 32, 119, 12, 30, 101);
/// BT.2020 limited (`kYuv2020Constants`).
const U2020: Coeffs = k(19003, -1160, 128, 12, 42, 107);
/// BT.2020 full (`kYuvV2020Constants`).
const V2020: Coeffs = k(16320, 32, 120, 11, 37, 94);

/// libavif's `getLibYUVConstants`: the constants for (matrix, primaries, range), or `None` where
/// libavif falls back to its own conversion.
pub(crate) fn libyuv_constants(mc: u8, cp: u8, full: bool, layout: Layout) -> Option<Coeffs> {
    // 4:0:0 with the identity matrix is read as BT.601.
    let mc = if layout == Layout::I400 && mc == 0 {
        6
    } else {
        mc
    };
    let family = match mc {
        1 => 709,
        2 | 5 | 6 => 601,
        9 => 2020,
        // Chroma-derived non-constant luminance: by the primaries.
        12 => match cp {
            1 | 2 => 709,
            5 | 6 => 601,
            9 => 2020,
            _ => return None,
        },
        _ => return None,
    };
    Some(match (family, full) {
        (709, true) => F709,
        (709, false) => H709,
        (601, true) => JPEG,
        (601, false) => I601,
        (_, true) => V2020,
        (_, false) => U2020,
    })
}

#[inline]
fn clamp8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

/// libyuv's `YuvPixel` (x86 layout of the constants): R, G, B.
#[inline]
fn yuv_pixel(y: u8, u: u8, v: u8, c: &Coeffs) -> [u8; 3] {
    yuv_pixel_y32(y as u32 * 0x0101, u, v, c)
}

/// `CALC_RGB16` and the final `Clamp(x >> 6)` from a 16-bit luma (`YuvPixel10`/`12` widen the
/// luma to 16 bits and narrow the chroma to 8 before it).
#[inline]
pub(crate) fn yuv_pixel_y32(y32: u32, u: u8, v: u8, c: &Coeffs) -> [u8; 3] {
    let y1 = ((y32.wrapping_mul(c.yg as u32)) >> 16) as i32 + c.yb;
    let ui = u as i32 - 128;
    let vi = v as i32 - 128;
    let b = y1 + ui * c.ub;
    let g = y1 - (ui * c.ug + vi * c.vg);
    let r = y1 + vi * c.vr;
    [clamp8(r >> 6), clamp8(g >> 6), clamp8(b >> 6)]
}

/// A plane sample: 8-bit, or 10/12-bit in a u16 (libyuv's 16-bit scalers use the same taps).
pub(crate) trait Sample: Copy + Default {
    fn u(self) -> u32;
    fn of(v: u32) -> Self;
    /// Neutral chroma.
    const MID: Self;
}

impl Sample for u8 {
    fn u(self) -> u32 {
        self as u32
    }
    fn of(v: u32) -> Self {
        v as u8
    }
    const MID: u8 = 128;
}

impl Sample for u16 {
    fn u(self) -> u32 {
        self as u32
    }
    fn of(v: u32) -> Self {
        v as u16
    }
    const MID: u16 = 512;
}

/// `ScaleRowUp2_Linear_Any`: a chroma row to `width` samples (3:1 taps, ends copied).
fn up_linear<T: Sample>(src: &[T], dst: &mut [T]) {
    let w = dst.len();
    if w == 0 {
        return;
    }
    let s = |i: usize| src.get(i).map_or(0, |v| v.u());
    dst[0] = T::of(s(0));
    let work = (w - 1) & !1;
    for k in 0..work / 2 {
        dst[1 + 2 * k] = T::of((3 * s(k) + s(k + 1) + 2) >> 2);
        dst[2 + 2 * k] = T::of((s(k) + 3 * s(k + 1) + 2) >> 2);
    }
    dst[w - 1] = T::of(s((w - 1) / 2));
}

/// `ScaleRowUp2_Bilinear_Any`: two chroma rows `a` (nearer `da`) and `b` to two output rows.
fn up_bilinear<T: Sample>(a: &[T], b: &[T], da: &mut [T], db: &mut [T]) {
    let w = da.len();
    if w == 0 {
        return;
    }
    let s = |i: usize| a.get(i).map_or(0, |v| v.u());
    let t = |i: usize| b.get(i).map_or(0, |v| v.u());
    da[0] = T::of((3 * s(0) + t(0) + 2) >> 2);
    db[0] = T::of((s(0) + 3 * t(0) + 2) >> 2);
    let work = (w - 1) & !1;
    for k in 0..work / 2 {
        let (s0, s1, t0, t1) = (s(k), s(k + 1), t(k), t(k + 1));
        da[1 + 2 * k] = T::of((s0 * 9 + s1 * 3 + t0 * 3 + t1 + 8) >> 4);
        da[2 + 2 * k] = T::of((s0 * 3 + s1 * 9 + t0 + t1 * 3 + 8) >> 4);
        db[1 + 2 * k] = T::of((s0 * 3 + s1 + t0 * 9 + t1 * 3 + 8) >> 4);
        db[2 + 2 * k] = T::of((s0 + s1 * 3 + t0 * 3 + t1 * 9 + 8) >> 4);
    }
    let l = (w - 1) / 2;
    da[w - 1] = T::of((3 * s(l) + t(l) + 2) >> 2);
    db[w - 1] = T::of((s(l) + 3 * t(l) + 2) >> 2);
}

/// The planes of one 8-bit frame (tightly packed) and its alpha, if any (full range).
pub(crate) struct Planes<'a> {
    pub width: usize,
    pub height: usize,
    pub layout: Layout,
    pub y: &'a [u8],
    pub u: &'a [u8],
    pub v: &'a [u8],
    pub alpha: Option<&'a [u8]>,
}

/// The full-resolution chroma rows libyuv feeds its `I444` row function for each output row.
pub(crate) fn for_each_row<T: Sample>(
    (w, h, layout): (usize, usize, Layout),
    pu: &[T],
    pv: &[T],
    mut f: impl FnMut(usize, &[T], &[T]),
) {
    let (cw, _) = layout.chroma_dims(w, h);
    fn row<T>(plane: &[T], r: usize, cw: usize) -> &[T] {
        let start = (r * cw).min(plane.len());
        let end = (start + cw).min(plane.len());
        &plane[start..end]
    }
    let up = |plane, r| row(plane, r, cw);
    let (mut u1, mut v1, mut u2, mut v2) = (
        vec![T::default(); w],
        vec![T::default(); w],
        vec![T::default(); w],
        vec![T::default(); w],
    );
    match layout {
        Layout::I444 => {
            for r in 0..h {
                f(r, up(pu, r), up(pv, r));
            }
        }
        Layout::I422 => {
            for r in 0..h {
                up_linear(up(pu, r), &mut u1);
                up_linear(up(pv, r), &mut v1);
                f(r, &u1, &v1);
            }
        }
        Layout::I420 => {
            // I420To*MatrixBilinear: row 0 from chroma row 0 (linear), then pairs of rows from
            // two chroma rows (bilinear), then for an even height the last row (linear).
            up_linear(up(pu, 0), &mut u1);
            up_linear(up(pv, 0), &mut v1);
            f(0, &u1, &v1);
            let mut c = 0;
            let mut y = 0;
            while y + 2 < h {
                up_bilinear(up(pu, c), up(pu, c + 1), &mut u1, &mut u2);
                up_bilinear(up(pv, c), up(pv, c + 1), &mut v1, &mut v2);
                f(y + 1, &u1, &v1);
                f(y + 2, &u2, &v2);
                c += 1;
                y += 2;
            }
            if h % 2 == 0 && h >= 2 {
                up_linear(up(pu, c), &mut u1);
                up_linear(up(pv, c), &mut v1);
                f(h - 1, &u1, &v1);
            }
        }
        Layout::I400 => {
            let mid = vec![T::MID; w];
            for r in 0..h {
                f(r, &mid, &mid);
            }
        }
    }
}

/// libavif + libyuv's 8-bit conversion to PIL's mode: "RGBA" when the image has alpha, "L" for
/// 4:0:0 without alpha, else "RGB". `premultiplied`: the file's alpha is premultiplied
/// (libavif then un-premultiplies the RGBA result).
pub(crate) fn convert(
    p: &Planes,
    mc: u8,
    cp: u8,
    full: bool,
    premultiplied: bool,
) -> Result<Pixels, Fail> {
    let (w, h) = (p.width, p.height);
    let n = w.checked_mul(h).ok_or(Fail::Limits)?;
    if p.y.len() < n {
        return Err(Fail::Corrupt("AVIF: the luma plane is short".into()));
    }
    if p.layout == Layout::I400 && p.alpha.is_none() {
        return gray(p, mc, full).map(Pixels::L);
    }
    if mc == 0 && p.layout == Layout::I444 {
        let wide = |s: &[u8]| s.iter().map(|&v| v as u16).collect::<Vec<u16>>();
        let alpha = p.alpha.map(|a| a[..n].to_vec());
        return identity(
            (&wide(p.y), &wide(p.u), &wide(p.v)),
            n,
            8,
            full,
            alpha,
            premultiplied,
        );
    }
    let c = libyuv_constants(mc, cp, full, p.layout).ok_or_else(|| {
        Fail::Unsupported(format!(
            "AVIF with matrix coefficients {mc} (colour primaries {cp}): libavif converts it \
             with its own float path, which glm5v does not reproduce"
        ))
    })?;
    let ch = if p.alpha.is_some() { 4 } else { 3 };
    let mut out = Vec::new();
    out.try_reserve_exact(n * ch).map_err(|_| Fail::Limits)?;
    out.resize(n * ch, 0);
    for_each_row((w, h, p.layout), p.u, p.v, |r, u, v| {
        let yrow = &p.y[r * w..r * w + w];
        let orow = &mut out[r * w * ch..(r + 1) * w * ch];
        for x in 0..w {
            let rgb = yuv_pixel(
                yrow[x],
                u.get(x).copied().unwrap_or(128),
                v.get(x).copied().unwrap_or(128),
                &c,
            );
            orow[x * ch..x * ch + 3].copy_from_slice(&rgb);
        }
    });
    if let Some(a) = p.alpha {
        for (px, &av) in out.chunks_exact_mut(4).zip(a.iter()) {
            px[3] = av;
        }
        if premultiplied {
            unattenuate(&mut out);
        }
        Ok(Pixels::Rgba(out))
    } else {
        Ok(Pixels::Rgb(out))
    }
}

/// libyuv's `fixed_invtbl8[a] & 0xffff`: 1/a in 8.8 fixed point.
fn inv_alpha(a: u32) -> u32 {
    match a {
        0 => 0,
        1 => 0xffff,
        255 => 0x0100,
        a => 0x10000 / a,
    }
}

/// `ARGBUnattenuate` as libyuv's x86 SIMD rows compute it: `((f | f << 8) * ia) >> 16`,
/// clamped to 255.
pub(crate) fn unattenuate(rgba: &mut [u8]) {
    for px in rgba.chunks_exact_mut(4) {
        let ia = inv_alpha(px[3] as u32);
        for c in &mut px[..3] {
            let f = *c as u32;
            *c = (((f | (f << 8)) * ia) >> 16).min(255) as u8;
        }
    }
}

/// libavif's `avifImageYUVAnyToRGBAnySlow` for a gray target: `(u8)(0.5 + clamp(Y) * 255)` with
/// `Y = (y - biasY) / rangeY` in f32. Fails (as libavif's `avifGetYUVColorSpaceInfo` does) for
/// the matrix codes it does not read.
fn gray(p: &Planes, mc: u8, full: bool) -> Result<Vec<u8>, Fail> {
    gray_check(mc, full)?;
    let n = p.width * p.height;
    let table: Vec<u8> = (0..=255u16).map(|v| gray_value(v, 8, full)).collect();
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Fail::Limits)?;
    out.extend(p.y[..n].iter().map(|&v| table[v as usize]));
    Ok(out)
}

/// libavif's `avifGetYUVColorSpaceInfo` refusals (the matrix codes it does not read).
pub(crate) fn gray_check(mc: u8, full: bool) -> Result<(), Fail> {
    // Reserved 3, the constant-luminance and ICtCp codes, codes past 17, YCgCo in limited
    // range, and YCgCo-Re/Ro (which need a 10/9-bit source for 8-bit output).
    if matches!(mc, 3 | 10 | 11 | 13 | 14 | 16 | 17) || mc >= 18 || (mc == 8 && !full) {
        return Err(Fail::Unsupported(format!(
            "AVIF with matrix coefficients {mc}: libavif refuses to convert it"
        )));
    }
    Ok(())
}

/// One gray value of the float path at `depth` bits: `Y = (min(v, max) - biasY) / rangeY`,
/// `(u8)(0.5 + clamp(Y, 0, 1) * 255)`, all in f32.
pub(crate) fn gray_value(v: u16, depth: u8, full: bool) -> u8 {
    let max = (1u32 << depth) - 1;
    let sh = depth - 8;
    let (bias, range) = if full {
        (0.0f32, max as f32)
    } else {
        ((16u32 << sh) as f32, (219u32 << sh) as f32)
    };
    let y = ((v as u32).min(max) as f32 - bias) / range;
    (0.5f32 + y.clamp(0.0, 1.0) * 255.0f32) as u8
}

/// libavif's conversion of the identity matrix (GBR, 4:4:4 only), its float path:
/// `G = Y`, `B = Cb`, `R = Cr`, each `(v - biasY) / rangeY` (the luma table serves the chroma
/// too), `(u8)(0.5 + clamp(c, 0, 1) * 255)`; for 8-bit full range that is a copy, as its fast
/// path does. The alpha comes in already at 8 bits (libavif's `avifReformatAlpha`).
pub(crate) fn identity(
    (y, u, v): (&[u16], &[u16], &[u16]),
    n: usize,
    depth: u8,
    full: bool,
    alpha: Option<Vec<u8>>,
    premultiplied: bool,
) -> Result<Pixels, Fail> {
    if premultiplied && alpha.is_some() {
        return Err(Fail::Unsupported(
            "AVIF with the identity matrix and premultiplied alpha".into(),
        ));
    }
    if y.len() < n || u.len() < n || v.len() < n {
        return Err(Fail::Corrupt("AVIF: a plane is short".into()));
    }
    let ch = if alpha.is_some() { 4 } else { 3 };
    let mut out = Vec::new();
    out.try_reserve_exact(n * ch).map_err(|_| Fail::Limits)?;
    for i in 0..n {
        out.extend_from_slice(&[
            gray_value(v[i], depth, full),
            gray_value(y[i], depth, full),
            gray_value(u[i], depth, full),
        ]);
        if let Some(a) = &alpha {
            out.push(a.get(i).copied().unwrap_or(255));
        }
    }
    Ok(if alpha.is_some() {
        Pixels::Rgba(out)
    } else {
        Pixels::Rgb(out)
    })
}
