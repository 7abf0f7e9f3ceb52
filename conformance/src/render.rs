//! Rendering a [`Report`]: a plain-text table, JSON, and an SVG plot of relative error against depth.

use crate::order::kind_and_block;
use crate::report::Report;
use std::collections::BTreeMap;
use std::fmt::Write;

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_finite() {
        format!("{x:.2e}")
    } else {
        format!("{x}")
    }
}

fn ratio_text(x: f64) -> String {
    if x < 1000.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    }
}

fn shape(s: &[usize]) -> String {
    format!("{s:?}")
}

/// The report as a table in forward order, the first divergence and the names only one side has.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let prod = |p: &Option<String>| p.as_ref().map(|p| format!(" ({p})")).unwrap_or_default();
    let _ = writeln!(o, "A (candidate): {}{}", r.a, prod(&r.producer_a));
    let _ = writeln!(o, "B (reference): {}{}", r.b, prod(&r.producer_b));
    let _ = writeln!(o, "tolerance {}", r.tolerance);
    if let Some(m) = &r.layout_mismatch {
        let _ = writeln!(o, "INPUT MISMATCH: {m}");
    }
    let w = r
        .taps
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let sw = r
        .taps
        .iter()
        .map(|t| shape(&t.shape_b).len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        o,
        "\n{:>3}  {:<w$}  {:<sw$}  {:>9}  {:>9}  {:>11}  {:>7}  {:>8}  worst element",
        "#", "tap", "shape", "max|diff|", "rel L2", "cosine", "x tol", "verdict"
    );
    for (i, t) in r.taps.iter().enumerate() {
        let (mx, rel, cos, ratio, at) = match &t.stats {
            Some(s) => {
                let at = match (s.worst, &t.worst_at) {
                    (Some(wst), Some(loc)) => {
                        format!("{loc}, col {}: {:.6e} vs {:.6e}", wst.col, wst.a, wst.b)
                    }
                    (Some(wst), None) => {
                        format!(
                            "row {}, col {}: {:.6e} vs {:.6e}",
                            wst.row, wst.col, wst.a, wst.b
                        )
                    }
                    _ => String::new(),
                };
                let ratio = t.ratio(&r.tolerance).map(ratio_text).unwrap_or_default();
                (
                    sci(s.max_abs),
                    sci(s.rel_l2),
                    format!("{:.8}", s.cosine),
                    ratio,
                    at,
                )
            }
            None => (
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                t.reason.clone().unwrap_or_default(),
            ),
        };
        let shp = if t.shape_a == t.shape_b {
            shape(&t.shape_b)
        } else {
            format!("{}/{}", shape(&t.shape_a), shape(&t.shape_b))
        };
        let _ = writeln!(
            o,
            "{:>3}  {:<w$}  {:<sw$}  {:>9}  {:>9}  {:>11}  {:>7}  {:>8}  {}",
            i + 1,
            t.name,
            shp,
            mx,
            rel,
            cos,
            ratio,
            t.verdict.label(),
            at
        );
    }
    let _ = writeln!(o);
    match &r.first_divergence {
        Some(n) => {
            let t = r
                .taps
                .iter()
                .find(|t| &t.name == n)
                .expect("divergence names a tap");
            let _ = writeln!(
                o,
                "first divergence: {n}: {}",
                t.reason.as_deref().unwrap_or("fails")
            );
        }
        None if !r.taps.is_empty() => {
            let _ = writeln!(o, "first divergence: none");
        }
        None => {
            let _ = writeln!(o, "no tap is present in both dumps: nothing was compared");
        }
    }
    if let Some(t) = r.worst() {
        let s = t.stats.as_ref().expect("worst has stats");
        let _ = writeln!(
            o,
            "worst tap: {} (rel L2 {}, {} x tolerance)",
            t.name,
            sci(s.rel_l2),
            ratio_text(t.ratio(&r.tolerance).unwrap_or(0.0))
        );
    }
    if !r.only_in_a.is_empty() {
        let _ = writeln!(
            o,
            "only in A ({}): {}",
            r.only_in_a.len(),
            r.only_in_a.join(", ")
        );
    }
    if !r.only_in_b.is_empty() {
        let _ = writeln!(
            o,
            "only in B ({}): {}",
            r.only_in_b.len(),
            r.only_in_b.join(", ")
        );
    }
    for s in &r.skipped {
        let _ = writeln!(o, "skipped {}: {}", s.name, s.reason);
    }
    let _ = writeln!(
        o,
        "result: {} ({} taps compared, {} failed)",
        if r.passed { "PASS" } else { "FAIL" },
        r.taps.len(),
        r.failures()
    );
    o
}

/// The report as pretty JSON (non-finite numbers become `null`).
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).expect("a report always serialises")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// Relative L2 against depth, log scale: one line per block tap kind (x = block index), the stem
/// (`patch_embed`, rope) left of block 0 and the head taps right of the last block, the tolerance as
/// a dashed line and the first divergence as a dotted vertical line. Taps with no numbers (shape or
/// NaN/Inf mismatch) are drawn as crosses at the top.
pub fn svg(r: &Report) -> String {
    // x coordinates: stem taps at 0, block i at i + 1, head taps after the last block in forward order.
    let depth = r
        .taps
        .iter()
        .filter_map(|t| kind_and_block(&t.name).1)
        .max()
        .map_or(0, |d| d + 1);
    let mut series: BTreeMap<String, Vec<(f64, Option<f64>)>> = BTreeMap::new();
    let mut kinds_in_order: Vec<String> = Vec::new();
    let mut head: Vec<(f64, Option<f64>, String)> = Vec::new();
    let mut next_head = depth as f64 + 1.0;
    let mut div_x = None;
    for t in &r.taps {
        let (kind, block) = kind_and_block(&t.name);
        let y = t
            .stats
            .as_ref()
            .map(|s| s.rel_l2)
            .filter(|_| t.verdict != crate::report::Verdict::NonFinite);
        let x = match block {
            Some(b) => {
                if !kinds_in_order.contains(&kind) {
                    kinds_in_order.push(kind.clone());
                }
                let x = b as f64 + 1.0;
                series.entry(kind).or_default().push((x, y));
                x
            }
            None => {
                let before_blocks = crate::order::compare(&t.name, "blocks.0.norm1").is_lt();
                let x = if before_blocks {
                    0.0
                } else {
                    next_head += 1.0;
                    next_head - 1.0
                };
                head.push((x, y, t.name.clone()));
                x
            }
        };
        if r.first_divergence.as_deref() == Some(t.name.as_str()) {
            div_x = Some(x);
        }
    }
    let x_max = next_head.max(depth as f64 + 1.0).max(1.0);
    let finite: Vec<f64> = series
        .values()
        .flatten()
        .map(|p| p.1)
        .chain(head.iter().map(|h| h.1))
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0)
        .chain([r.tolerance.rel_l2].into_iter().filter(|t| *t > 0.0))
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(0.0f64, f64::max);
    let (mut d_lo, mut d_hi) = if finite.is_empty() {
        (-8.0, 0.0)
    } else {
        (lo.log10().floor() - 1.0, hi.log10().ceil())
    };
    if d_hi <= d_lo {
        d_hi = d_lo + 1.0;
    }
    d_lo = d_lo.max(-16.0);

    let (w, h) = (960.0, 560.0);
    let (ml, mr, mt, mb) = (80.0, 230.0, 40.0, 150.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let px = |x: f64| ml + pw * x / x_max;
    // zero or off-scale values sit on the bottom axis, infinities / missing numbers on the top
    let py = |v: f64| {
        let l = if v > 0.0 && v.is_finite() {
            v.log10().clamp(d_lo, d_hi)
        } else if v == 0.0 {
            d_lo
        } else {
            d_hi
        };
        mt + ph * (d_hi - l) / (d_hi - d_lo)
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let title = format!(
        "relative L2 per tap: {} vs {} ({})",
        short(&r.a),
        short(&r.b),
        if r.passed { "pass" } else { "FAIL" }
    );
    let _ = writeln!(
        s,
        r#"<text x="{ml}" y="22" font-size="14">{}</text>"#,
        esc(&title)
    );
    // grid lines per decade
    let mut d = d_lo;
    while d <= d_hi + 1e-9 {
        let y = py(10f64.powf(d));
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">1e{}</text>"##,
            ml + pw,
            ml - 6.0,
            y + 4.0,
            d as i32
        );
        d += 1.0;
    }
    // x axis labels: stem, every k-th block, head tap names
    let step = ((depth as f64 / 12.0).ceil() as usize).max(1);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">stem</text>"#,
        px(0.0),
        mt + ph + 16.0
    );
    for b in (0..depth).step_by(step) {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{b}</text>"#,
            px(b as f64 + 1.0),
            mt + ph + 16.0
        );
    }
    for (x, _, name) in head.iter().filter(|h| h.0 > 0.0) {
        let (tx, ty) = (px(*x), mt + ph + 12.0);
        let _ = writeln!(
            s,
            r#"<text x="{tx:.1}" y="{ty:.1}" transform="rotate(40 {tx:.1} {ty:.1})" font-size="10">{}</text>"#,
            esc(name)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">block index (stem left, head right)</text>"#,
        ml + pw / 2.0,
        h - 8.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{:.1}" transform="rotate(-90 18 {:.1})" text-anchor="middle">rel L2 = ||a-b|| / ||b||</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    // tolerance and divergence
    if r.tolerance.rel_l2 > 0.0 {
        let y = py(r.tolerance.rel_l2);
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#d00" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#d00" text-anchor="end">{}</text>"##,
            ml + pw,
            ml + pw - 4.0,
            y - 4.0,
            esc(&format!("{} {:.1e}", r.tolerance.name, r.tolerance.rel_l2))
        );
    }
    if let Some(x) = div_x {
        let x = px(x);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{mt}" x2="{x:.1}" y2="{:.1}" stroke="#d00" stroke-dasharray="2 3"/>"##,
            mt + ph
        );
    }
    // series
    let mut legend = Vec::new();
    for (i, kind) in kinds_in_order.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts = &series[kind];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(y.unwrap_or(f64::INFINITY))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        for (x, y) in pts {
            marker(
                &mut s,
                px(*x),
                py(y.unwrap_or(f64::INFINITY)),
                color,
                y.is_none(),
            );
        }
        legend.push((kind.clone(), color));
    }
    for (x, y, _) in &head {
        marker(
            &mut s,
            px(*x),
            py(y.unwrap_or(f64::INFINITY)),
            "#000",
            y.is_none(),
        );
    }
    if !head.is_empty() {
        legend.push(("stem / head taps".into(), "#000"));
    }
    for (i, (name, color)) in legend.iter().enumerate() {
        let (lx, ly) = (ml + pw + 16.0, mt + 10.0 + 18.0 * i as f64);
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn marker(s: &mut String, x: f64, y: f64, color: &str, missing: bool) {
    if missing {
        let _ = writeln!(
            s,
            r#"<path d="M{:.1},{:.1} l8,8 m0,-8 l-8,8" stroke="{color}" stroke-width="2"/>"#,
            x - 4.0,
            y - 4.0
        );
    } else {
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{color}"/>"#
        );
    }
}

fn short(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}
