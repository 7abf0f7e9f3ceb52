//! Forward order of tap names (the tap-dump layout: docs/CONFORMANCE.md, "File formats"), so that the first tap over tolerance is
//! the point where the numbers diverge, and the depth coordinate used by the plot.

use glm5v_reference::taps::{BLOCK_PARTS, HEAD_TAPS};
use std::cmp::Ordering;

/// Position of a tap in the forward pass: `(stage, block, step)`; names we do not know sort last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    stage: u8,
    block: usize,
    step: u16,
}

/// Steps inside one block, in execution order: the reference's list of block taps without the
/// block output (`""`, its last entry). A sub-module not listed (a producer may add module
/// paths, e.g. `mlp.gate_proj`) goes right before the listed parent it belongs to.
const BLOCK_STEPS: &[&str] = BLOCK_PARTS.split_last().unwrap().1;

/// The merger's taps in execution order: the reference's head taps after `post_layernorm` and
/// `downsample`.
const MERGER_STEPS: &[&str] = HEAD_TAPS.split_at(2).1;

/// The rank of a tap name.
pub fn rank(name: &str) -> Rank {
    let r = |stage, block, step| Rank { stage, block, step };
    match name {
        "pixel_values" | "pixel_values_videos" => return r(0, 0, 0),
        "patch_embed" => return r(1, 0, 0),
        "rotary_pos_emb" | "rotary_pos_emb.cos" => return r(2, 0, 0),
        "rotary_pos_emb.sin" => return r(2, 0, 1),
        "post_layernorm" => return r(4, 0, 0),
        "downsample" => return r(5, 0, 0),
        _ => {}
    }
    if let Some(rest) = name.strip_prefix("blocks.") {
        let (idx, sub) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(i) = idx.parse::<usize>() {
            return r(3, i, block_step(sub));
        }
    }
    if let Some(i) = MERGER_STEPS.iter().position(|s| *s == name) {
        return r(6, 0, 20 * i as u16 + 10);
    }
    if name.starts_with("merger.") {
        // an unlisted merger sub-module: before the final `merger` output
        return r(6, 0, 20 * (MERGER_STEPS.len() as u16 - 1));
    }
    r(7, 0, 0)
}

fn block_step(sub: &str) -> u16 {
    if sub.is_empty() {
        return 20 * BLOCK_STEPS.len() as u16 + 10; // the block output
    }
    if let Some(i) = BLOCK_STEPS.iter().position(|s| *s == sub) {
        return 20 * i as u16 + 10;
    }
    // an unlisted sub-module: just before the listed step whose path prefixes it
    for (i, s) in BLOCK_STEPS.iter().enumerate().rev() {
        if sub.starts_with(&format!("{s}.")) {
            return 20 * i as u16 + 5;
        }
    }
    20 * BLOCK_STEPS.len() as u16 + 5
}

/// Sorts names in forward order (unknown names last, alphabetically).
pub fn sort_forward(names: &mut [String]) {
    names.sort_by(|a, b| compare(a, b));
}

pub fn compare(a: &str, b: &str) -> Ordering {
    rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
}

/// The kind of a tap (the name without its block index: `blocks.3.attn.qkv` -> `attn.qkv`,
/// `blocks.3` -> `block`) and its block index, for the plot's one line per kind.
pub fn kind_and_block(name: &str) -> (String, Option<usize>) {
    if let Some(rest) = name.strip_prefix("blocks.") {
        let (idx, sub) = rest.split_once('.').unwrap_or((rest, ""));
        if let Ok(i) = idx.parse::<usize>() {
            let kind = if sub.is_empty() {
                "block".to_string()
            } else {
                sub.to_string()
            };
            return (kind, Some(i));
        }
    }
    (name.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_order_of_upstream_taps() {
        let expected = [
            "pixel_values",
            "patch_embed",
            "rotary_pos_emb.cos",
            "rotary_pos_emb.sin",
            "blocks.0.norm1",
            "blocks.0.attn.qkv",
            "blocks.0.attn.q_norm",
            "blocks.0.attn.k_norm",
            "blocks.0.attn.proj.input",
            "blocks.0.attn",
            "blocks.0.norm2",
            "blocks.0.mlp.gate_proj",
            "blocks.0.mlp",
            "blocks.0",
            "blocks.2.norm1",
            "blocks.2",
            "blocks.10.norm1",
            "blocks.10",
            "post_layernorm",
            "downsample",
            "merger.proj",
            "merger.post_projection_norm",
            "merger.act1",
            "merger.gate_proj",
            "merger.up_proj",
            "merger.down_proj",
            "merger",
            "zz_extra",
        ];
        let mut names: Vec<String> = expected.iter().rev().map(|s| s.to_string()).collect();
        sort_forward(&mut names);
        assert_eq!(names, expected);
    }

    #[test]
    fn kinds() {
        assert_eq!(
            kind_and_block("blocks.12.attn.qkv"),
            ("attn.qkv".into(), Some(12))
        );
        assert_eq!(kind_and_block("blocks.3"), ("block".into(), Some(3)));
        assert_eq!(kind_and_block("merger"), ("merger".into(), None));
    }
}
