//! The worker of a tower that queues its forwards on a device ([`QueuedTower`]: a GPU).
//!
//! Up to the tower's depth of forwards are queued at once (two on a GPU: one running, the next
//! uploaded behind it), so the device goes from one forward straight to the next while the host
//! gathers the next batch's pixels into the device's staging memory and hands out the last
//! batch's rows. The next batch is taken as late as it can be without the device waiting: when
//! a full batch is ready, when nothing more is being decoded, or when the forward in flight is
//! expected to end within the time staging a batch takes (both learned from the finished
//! forwards). A worker with nothing in flight takes what is ready at once, as the host worker
//! does: a free device never waits for a fuller batch.

use super::{
    Decoded, Embedder, Ran, Shared, State, deliver, fail, gather_into, live_inputs, take_ready,
    wake_all,
};
use crate::geometry::Grid;
use crate::tower::{QueuedTower, Ticket};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

/// One forward queued on the device.
struct InFlight {
    ticket: Ticket,
    live: Vec<Decoded>,
    grids: Vec<Grid>,
    tokens: usize,
    /// When its gather began, and how long the gather took.
    started: Instant,
    gather: Duration,
    /// When the device is expected to be done with it.
    expected_end: Instant,
}

/// What the finished forwards taught: the device's seconds per merged token, and the seconds to
/// stage a batch (the host's gather into the staging memory, then the upload), as moving
/// averages. Not the enqueue's wall time: a forward without a CUDA graph waits there for the
/// one before it (its geometry's uploads), which is no staging time.
#[derive(Debug, Default, Clone, Copy)]
struct Pace {
    device_per_token: Option<f64>,
    stage: Option<f64>,
}

/// Weight of the newest forward in the moving averages.
const PACE_WEIGHT: f64 = 0.25;

impl Pace {
    fn learn(&mut self, tokens: usize, device: Duration, staged: Duration) {
        let avg =
            |old: Option<f64>, new: f64| Some(old.map_or(new, |o| o + PACE_WEIGHT * (new - o)));
        if tokens > 0 && !device.is_zero() {
            self.device_per_token =
                avg(self.device_per_token, device.as_secs_f64() / tokens as f64);
        }
        self.stage = avg(self.stage, staged.as_secs_f64());
    }

    /// The device's expected time for `tokens` (zero until a forward has finished).
    fn device(&self, tokens: usize) -> Duration {
        Duration::from_secs_f64(self.device_per_token.unwrap_or(0.0) * tokens as f64)
    }

    /// When to take the next batch behind `last`: the staging time (with half again and a
    /// millisecond to spare) before `last` is expected to end.
    fn take_by(&self, last: &InFlight) -> Instant {
        let lead = Duration::from_secs_f64(self.stage.unwrap_or(0.0) * 1.5) + LEAD_SPARE;
        last.expected_end
            .checked_sub(lead)
            .map_or(last.started, |t| t.max(last.started))
    }
}

const LEAD_SPARE: Duration = Duration::from_millis(1);

/// What waiting for ready inputs gave.
enum Take {
    Batch(Vec<Decoded>),
    /// The deadline passed with nothing ready.
    NotYet,
    /// Nothing is ready, pending or decoding, and the batcher is closing.
    Closed,
}

/// Waits for decoded inputs and takes them. With no deadline (nothing in flight) it takes
/// whatever is ready as soon as something is; with one, it waits for a full batch, for the end
/// of decoding, or for the deadline, then takes what is ready.
fn take(shared: &Shared, deadline: Option<Instant>) -> Take {
    let mut st: MutexGuard<'_, State> = shared.state.lock().expect("batcher state");
    loop {
        let drained = st.pending.is_empty() && st.decoding == 0;
        if !st.ready.is_empty() {
            let now = Instant::now();
            let go = match deadline {
                None => true,
                Some(t) => {
                    now >= t
                        || drained
                        || st.ready.values().map(|d| d.tokens).sum::<usize>()
                            >= shared.options.max_batch_tokens
                }
            };
            if go {
                let batch = take_ready(shared, &mut st);
                drop(st);
                shared.decode_cv.notify_all();
                return Take::Batch(batch);
            }
        } else if drained && st.closing {
            return Take::Closed;
        }
        st = match deadline {
            None => shared.ready_cv.wait(st).expect("batcher state"),
            Some(t) => {
                let now = Instant::now();
                if now >= t {
                    return Take::NotYet;
                }
                shared
                    .ready_cv
                    .wait_timeout(st, t - now)
                    .expect("batcher state")
                    .0
            }
        };
    }
}

pub(super) fn worker_loop(
    shared: &Shared,
    embedder: &Embedder,
    queue: &dyn QueuedTower,
    worker: usize,
) {
    let depth = queue.depth().max(1);
    // staging for the largest batch the budget allows: one slot's before the first input,
    // the next ones' each after a forward is queued (beside it, not before it)
    let rows = shared
        .options
        .max_batch_tokens
        .saturating_mul(shared.merge_unit);
    // whether a slot still lacks its staging
    let reserve = || match queue.reserve(rows) {
        Ok(more) => more,
        Err(e) => {
            eprintln!(
                "glm5v: worker {worker}: staging memory not set aside ({e}); it grows per batch"
            );
            false
        }
    };
    let mut reserving = reserve();
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut pace = Pace::default();
    loop {
        if in_flight.len() < depth {
            let deadline = in_flight.back().map(|last| pace.take_by(last));
            match take(shared, deadline) {
                Take::Batch(batch) => {
                    let after = in_flight.back().map(|f| f.expected_end);
                    if let Some(f) = enqueue(shared, embedder, queue, batch, after, &pace) {
                        in_flight.push_back(f);
                        if reserving {
                            reserving = reserve();
                        }
                    }
                    continue;
                }
                Take::Closed if in_flight.is_empty() => {
                    wake_all(shared);
                    return;
                }
                Take::Closed | Take::NotYet => {}
            }
        }
        if let Some(f) = in_flight.pop_front() {
            finish(shared, embedder, queue, worker, f, &mut pace);
        }
    }
}

/// Gathers the batch's pixels into the device's staging memory and queues its forward; `None`
/// when nothing was queued (every input cancelled, or the tower refused it: its inputs are
/// answered).
fn enqueue(
    shared: &Shared,
    embedder: &Embedder,
    queue: &dyn QueuedTower,
    batch: Vec<Decoded>,
    after: Option<Instant>,
    pace: &Pace,
) -> Option<InFlight> {
    let live = live_inputs(shared, batch);
    if live.is_empty() {
        return None;
    }
    let started = Instant::now();
    let rows: usize = live.iter().map(|d| d.pixels.len() / shared.patch_dim).sum();
    let grids: Vec<Grid> = live.iter().map(|d| d.grid).collect();
    let tokens: usize = live.iter().map(|d| d.tokens).sum();
    let mut gather = Duration::ZERO;
    let result = {
        let srcs: Vec<&[f32]> = live.iter().map(|d| d.pixels.as_slice()).collect();
        let mut fill = |dst: &mut [f32]| {
            let t = Instant::now();
            embedder.install(|| gather_into(&srcs, dst));
            gather = t.elapsed();
        };
        catch_unwind(AssertUnwindSafe(|| queue.enqueue(rows, &grids, &mut fill)))
    };
    match result {
        Ok(Ok(ticket)) => {
            let now = Instant::now();
            let begins = after.map_or(now, |a| a.max(now));
            Some(InFlight {
                ticket,
                live,
                grids,
                tokens,
                started,
                gather,
                expected_end: begins + pace.device(tokens),
            })
        }
        Ok(Err(e)) => {
            fail(shared, live, &e.to_string());
            None
        }
        Err(_) => {
            fail(shared, live, "queueing the forward panicked");
            None
        }
    }
}

/// Waits for a queued forward and hands its inputs their rows.
fn finish(
    shared: &Shared,
    embedder: &Embedder,
    queue: &dyn QueuedTower,
    worker: usize,
    f: InFlight,
    pace: &mut Pace,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        embedder.install(|| queue.finish(f.ticket))
    }));
    match result {
        Ok(Ok(done)) => {
            pace.learn(f.tokens, done.device, f.gather + done.upload);
            let items = crate::embedder::spans(embedder.config(), &f.grids);
            let ran = Ran {
                started: f.started,
                gather: f.gather,
                forward: f.started.elapsed().saturating_sub(f.gather),
                device: Some(done.device),
            };
            deliver(shared, worker, f.live, done.embeddings, &items, ran);
        }
        Ok(Err(e)) => fail(shared, f.live, &e.to_string()),
        Err(_) => fail(shared, f.live, "the forward panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_flight(started: Instant, expected_end: Instant) -> InFlight {
        InFlight {
            ticket: Ticket(0),
            live: Vec::new(),
            grids: Vec::new(),
            tokens: 0,
            started,
            gather: Duration::ZERO,
            expected_end,
        }
    }

    /// The pace: moving averages of the device's time per token and the staging time, and the
    /// next batch taken the staging time (x1.5, +1 ms) before the one in flight should end.
    #[test]
    fn the_next_batch_is_taken_in_time_to_stage_it() {
        let mut p = Pace::default();
        assert_eq!(
            p.device(1000),
            Duration::ZERO,
            "nothing learned: take at once"
        );
        let t0 = Instant::now();
        let f = in_flight(t0, t0 + Duration::from_millis(40));
        assert_eq!(p.take_by(&f), t0 + Duration::from_millis(39));
        p.learn(1000, Duration::from_millis(20), Duration::from_millis(4));
        assert_eq!(p.device(500), Duration::from_millis(10));
        // 40 ms - (4 x 1.5 + 1) = 33 ms
        assert_eq!(p.take_by(&f), t0 + Duration::from_millis(33));
        p.learn(1000, Duration::from_millis(40), Duration::from_millis(8));
        // 20 + 0.25 x (40 - 20) = 25 ms per 1000 tokens; staging 4 + 0.25 x 4 = 5 ms
        let d = p.device(1000).as_secs_f64();
        assert!((d - 0.025).abs() < 1e-12, "{d}");
        let by = p.take_by(&f) - t0;
        assert!((by.as_secs_f64() - (0.040 - 0.0085)).abs() < 1e-9, "{by:?}");
        // a staging time longer than the forward: taken when it started, not before
        p.learn(1, Duration::from_millis(1), Duration::from_secs(10));
        assert_eq!(p.take_by(&f), t0);
    }
}
