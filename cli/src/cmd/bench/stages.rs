//! Where a served load's time went: `glm5v serve`'s `/metrics` read before and after a turn, the
//! histograms' sums and counts differenced, one line per turn (`bench serve`).

use std::collections::HashMap;
use std::time::Duration;

/// `name -> value` of every sample line of a Prometheus / OpenMetrics text without labels
/// (`glm5v_forward_duration_seconds_sum 1.5`); labelled lines and comments are skipped.
pub(super) fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (name, value) = (it.next()?, it.next()?);
            if name.contains('{') {
                return None;
            }
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The duration histograms whose means the line reports: (metric, label).
const HISTOGRAMS: [(&str, &str); 6] = [
    ("glm5v_decode_duration_seconds", "decode"),
    ("glm5v_queue_duration_seconds", "queue"),
    ("glm5v_batch_wait_duration_seconds", "wait"),
    ("glm5v_batch_gather_duration_seconds", "gather"),
    ("glm5v_forward_duration_seconds", "forward"),
    ("glm5v_request_duration_seconds", "request"),
];

/// One line: forwards run, mean inputs and tokens per forward, the worker's share of the wall
/// time in gather and forward (over 100% with several workers), and the mean of each stage.
pub(super) fn stage_line(before: &str, after: &str, wall: Duration) -> Option<String> {
    let (b, a) = (samples(before), samples(after));
    let delta = |name: &str| Some(a.get(name)? - b.get(name).copied().unwrap_or(0.0));
    let batches = delta("glm5v_batch_items_count")?;
    if batches <= 0.0 {
        return None;
    }
    let wall = wall.as_secs_f64();
    let mut parts = vec![format!(
        "{batches:.0} forwards ({:.1}/s), {:.1} inputs and {:.0} tokens a forward",
        batches / wall,
        delta("glm5v_batch_items_sum")? / batches,
        delta("glm5v_batch_tokens_sum")? / batches,
    )];
    for (label, name) in [
        ("gather", "glm5v_batch_gather_duration_seconds_sum"),
        ("forward", "glm5v_forward_duration_seconds_sum"),
    ] {
        parts.push(format!(
            "{label} {:.0}% of the wall",
            100.0 * delta(name)? / wall
        ));
    }
    if let Some(d) = delta("glm5v_device_busy_seconds_total").filter(|d| *d > 0.0) {
        parts.push(format!("device busy {:.0}% of the wall", 100.0 * d / wall));
    }
    let means: Vec<String> = HISTOGRAMS
        .iter()
        .filter_map(|(m, label)| {
            let n = delta(&format!("{m}_count"))?;
            let s = delta(&format!("{m}_sum"))?;
            (n > 0.0).then(|| format!("{label} {:.1} ms", 1e3 * s / n))
        })
        .collect();
    parts.push(format!("means: {}", means.join(", ")));
    Some(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP glm5v_batch_items Inputs per forward.\n\
        glm5v_batch_items_sum 10\nglm5v_batch_items_count 2\n\
        glm5v_batch_items_bucket{le=\"1.0\"} 0\n\
        glm5v_batch_tokens_sum 2560\nglm5v_batch_tokens_count 2\n\
        glm5v_forward_duration_seconds_sum 0.1\nglm5v_forward_duration_seconds_count 2\n\
        glm5v_batch_gather_duration_seconds_sum 0.01\nglm5v_batch_gather_duration_seconds_count 2\n\
        glm5v_decode_duration_seconds_sum 0.05\nglm5v_decode_duration_seconds_count 10\n";
    const AFTER: &str = "glm5v_batch_items_sum 50\nglm5v_batch_items_count 6\n\
        glm5v_batch_tokens_sum 12800\nglm5v_batch_tokens_count 6\n\
        glm5v_forward_duration_seconds_sum 0.5\nglm5v_forward_duration_seconds_count 6\n\
        glm5v_batch_gather_duration_seconds_sum 0.05\nglm5v_batch_gather_duration_seconds_count 6\n\
        glm5v_decode_duration_seconds_sum 0.25\nglm5v_decode_duration_seconds_count 50\n\
        glm5v_device_busy_seconds_total 0.3\n\
        glm5v_requests_total{route=\"embeddings\",outcome=\"ok\"} 50\n";

    #[test]
    fn the_line_reports_the_turn_alone() {
        let s = samples(AFTER);
        assert_eq!(s["glm5v_batch_items_sum"], 50.0);
        assert!(!s.keys().any(|k| k.contains('{')), "labelled lines skipped");
        let line = stage_line(BEFORE, AFTER, Duration::from_secs(2)).expect("forwards ran");
        // 4 forwards of 40 inputs and 10240 tokens in 2 s; forward 0.4 s of 2 s, gather 0.04
        assert!(
            line.starts_with("4 forwards (2.0/s), 10.0 inputs and 2560 tokens a forward"),
            "{line}"
        );
        assert!(line.contains("gather 2% of the wall"), "{line}");
        assert!(line.contains("forward 20% of the wall"), "{line}");
        // no device time before, 0.3 s after
        assert!(line.contains("device busy 15% of the wall"), "{line}");
        // decode: 0.2 s over 40 inputs; forward 0.4 s over 4
        assert!(line.contains("decode 5.0 ms"), "{line}");
        assert!(line.contains("forward 100.0 ms"), "{line}");
        assert!(
            stage_line(AFTER, AFTER, Duration::from_secs(1)).is_none(),
            "no forward ran"
        );
    }
}
