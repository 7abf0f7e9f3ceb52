//! A team of spinning threads for a forward's many short parallel loops.
//!
//! Why not rayon's loops alone: a forward at a small grid is hundreds of parallel loops of a
//! millisecond or less (24 blocks x a dozen ops), separated by short serial stretches. rayon's
//! idle workers go to sleep within microseconds of running out of work, and the next loop has to
//! wake them: a futex wake-up and, on a virtual machine whose idle vCPU halted, the host
//! scheduling it again. An 8x8 forward on the 2-core VM here made ~290 context switches and
//! spent ~8% of its CPU time idle or in the scheduler. Inside [`with_team`] the pool's other
//! threads instead wait for the next loop spinning, and [`for_each`] hands out a loop's indices
//! to the caller and to them (~70-100 context switches per forward; forwards alternating with and
//! without a team, `GLM5V_AB_TEAM=1 full_geometry 2 8`: medians 7-10% shorter with one).
//!
//! Each thread of a team starts on its own contiguous share of a loop's indices, in order (the
//! panel kernel prefetches the weights of the task that follows in memory: its thread's next
//! task), and one that runs out takes half of what another has left. Which thread runs which
//! index is not fixed, so a kernel's values must not depend on it (none does: each index
//! writes its own outputs).
//!
//! Outside a team (or nested inside one of its loops) [`for_each`] is rayon's parallel loop, so
//! every kernel works the same with or without one. One team exists at a time in a process:
//! forwards run side by side from several threads use rayon's loops (spinning threads would only
//! take cores from each other). A helper waiting between loops runs queued rayon work of its
//! pool, so holding a pool thread never starves rayon work that someone waits for; that work
//! may be long (another caller's whole forward on a shared pool), and the team's loops run
//! without that helper meanwhile. A helper job that starts on a thread inside one of a loop's
//! calls (picked up while that call waits in rayon) returns at once.

use rayon::prelude::*;
use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Threads of a team at most (the leader and its helpers).
const MAX_TEAM: usize = 32;

/// A participant's indices still to run, `lo..hi`, packed as `lo | hi << 32` so that the owner
/// (taking from the front) and thieves (taking the back half) agree with one compare-exchange.
/// On its own cache line: each owner updates its own.
#[repr(align(128))]
struct Range(AtomicU64);

fn pack(lo: usize, hi: usize) -> u64 {
    lo as u64 | (hi as u64) << 32
}

fn unpack(v: u64) -> (usize, usize) {
    ((v & 0xffff_ffff) as usize, (v >> 32) as usize)
}

/// One parallel loop: `f(0..n)`, on the stack of the thread that called [`for_each`].
///
/// Participant `p` of `parts` starts with the indices `n * p / parts..n * (p + 1) / parts` and
/// runs them in order (a kernel's tasks in memory order: what one prefetches next is what the
/// same thread does next); one that runs out takes the back half of another's remaining range
/// as its own (where others may take from it in turn), until no range has indices left.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    seq: u64,
    parts: usize,
    ranges: [Range; MAX_TEAM],
    done: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    fn new(f: &(dyn Fn(usize) + Sync), n: usize, seq: u64, parts: usize) -> Job<'_> {
        let parts = parts.clamp(1, MAX_TEAM);
        Job {
            f,
            seq,
            parts,
            ranges: std::array::from_fn(|p| {
                let (lo, hi) = if p < parts {
                    (n * p / parts, n * (p + 1) / parts)
                } else {
                    (0, 0)
                };
                Range(AtomicU64::new(pack(lo, hi)))
            }),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
        }
    }

    /// Runs indices as participant `me` until no range has any left.
    fn work(&self, me: usize) {
        let me = me.min(self.parts - 1);
        let mut ran = 0;
        loop {
            while let Some(i) = self.take_front(me) {
                self.run(i);
                ran += 1;
            }
            if !self.steal_into(me) {
                break;
            }
        }
        // Release: the calls' writes are visible to whoever sees the count (one add per
        // participant, not per index: the counter's line is shared by all of them).
        self.done.fetch_add(ran, Ordering::Release);
    }

    /// The next index of `p`'s range (its owner's side).
    fn take_front(&self, p: usize) -> Option<usize> {
        let r = &self.ranges[p].0;
        let mut v = r.load(Ordering::Acquire);
        loop {
            let (lo, hi) = unpack(v);
            if lo >= hi {
                return None;
            }
            match r.compare_exchange_weak(v, pack(lo + 1, hi), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(lo),
                Err(now) => v = now,
            }
        }
    }

    /// Moves the back half of another participant's range (the one with the most left) into
    /// `me`'s, which is empty; false when every range is empty.
    fn steal_into(&self, me: usize) -> bool {
        loop {
            let (mut victim, mut most) = (None, 0);
            for p in (0..self.parts).filter(|&p| p != me) {
                let (lo, hi) = unpack(self.ranges[p].0.load(Ordering::Acquire));
                if hi > lo && hi - lo > most {
                    (victim, most) = (Some(p), hi - lo);
                }
            }
            let Some(p) = victim else {
                return false;
            };
            let r = &self.ranges[p].0;
            let v = r.load(Ordering::Acquire);
            let (lo, hi) = unpack(v);
            if lo >= hi {
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            if r.compare_exchange(v, pack(lo, mid), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // our range was empty, so only thieves look at it: they see it refilled
                self.ranges[me].0.store(pack(mid, hi), Ordering::Release);
                return true;
            }
        }
    }

    fn run(&self, i: usize) {
        IN_CALL.set(IN_CALL.get() + 1);
        let result = catch_unwind(AssertUnwindSafe(|| (self.f)(i)));
        IN_CALL.set(IN_CALL.get() - 1);
        if let Err(p) = result {
            let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(p);
        }
    }
}

/// What the caller and its helpers share.
struct Team {
    /// The loop being handed out, or null between loops.
    job: AtomicPtr<Job<'static>>,
    /// The `seq` of the last loop published (helpers compare it with the last one they ran).
    seq: AtomicU64,
    /// Helpers between announcing themselves and leaving a loop (see [`helper`]).
    busy: AtomicUsize,
    quit: AtomicBool,
    /// The leader and its helpers.
    parts: usize,
}

thread_local! {
    /// The team this thread leads, while it is outside the team's loops.
    static LEADING: Cell<*const Team> = const { Cell::new(std::ptr::null()) };
    /// How many loop calls this thread is inside (nested through rayon work it picked up).
    static IN_CALL: Cell<usize> = const { Cell::new(0) };
}

/// Whether [`with_team`] forms teams: `GLM5V_CPU_TEAM=0` in the environment (read once) or
/// [`set_enabled`] turns them off, for A/B measurements; the values are the same either way.
pub fn enabled() -> bool {
    static FROM_ENV: std::sync::Once = std::sync::Once::new();
    FROM_ENV.call_once(|| {
        if std::env::var("GLM5V_CPU_TEAM").as_deref() == Ok("0") {
            ENABLED.store(false, Ordering::Relaxed);
        }
    });
    ENABLED.load(Ordering::Relaxed)
}

/// Turns teams on or off for the [`with_team`] calls that follow (see [`enabled`]).
pub fn set_enabled(on: bool) {
    let _ = enabled(); // the environment's word first, so that this call has the last
    ENABLED.store(on, Ordering::Relaxed);
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether a team exists in this process. One at a time: forwards run side by side from
/// several threads (an engine's callers sharing one pool) take rayon's loops instead, rather
/// than each keeping threads spinning on cores the others need.
static TEAM_FORMED: AtomicBool = AtomicBool::new(false);

/// Runs `f` on this thread with the current rayon pool's other threads (as many as it has, less
/// one, at most 31) spinning for its [`for_each`] loops, then lets them go. With a one-thread
/// pool, inside a team already, while another thread's team exists, or with teams turned off
/// ([`enabled`]), it just runs `f`.
pub fn with_team<R>(f: impl FnOnce() -> R) -> R {
    let helpers = rayon::current_num_threads().clamp(1, MAX_TEAM) - 1;
    if helpers == 0
        || !LEADING.get().is_null()
        || !enabled()
        || TEAM_FORMED
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return f();
    }
    let team = Team {
        job: AtomicPtr::new(std::ptr::null_mut()),
        seq: AtomicU64::new(0),
        busy: AtomicUsize::new(0),
        quit: AtomicBool::new(false),
        parts: helpers + 1,
    };
    rayon::in_place_scope(|s| {
        for id in 1..=helpers {
            let team = &team;
            s.spawn(move |_| helper(team, id));
        }
        /// Lets the helpers go and forgets the team, also when `f` panics (else the scope would
        /// wait for helpers spinning forever).
        struct Release<'t>(&'t Team);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                LEADING.set(std::ptr::null());
                self.0.quit.store(true, Ordering::Release);
                TEAM_FORMED.store(false, Ordering::Release);
            }
        }
        let _release = Release(&team);
        LEADING.set(&team);
        f()
    })
}

/// A helper: runs the indices of each new loop it sees until the leader quits. Helpers that
/// start after the leader finished (not yet picked up by a pool thread then) return at once.
fn helper(team: &Team, id: usize) {
    // A helper job picked up by a thread that is inside a loop's call (waiting in a rayon call
    // of that call's body, stealing work meanwhile) must not spin there: that call would never
    // return, its loop never finish, and the leader never let the helpers go.
    if IN_CALL.get() > 0 {
        return;
    }
    let mut last = 0;
    let mut spins = 0;
    loop {
        if team.quit.load(Ordering::Acquire) {
            return;
        }
        let seq = team.seq.load(Ordering::Acquire);
        if seq == last {
            spins = pause_helper(spins);
            continue;
        }
        spins = 0;
        // Announce first, then look: the leader clears `job` and then waits for `busy` to read
        // zero before the job leaves its stack, so a job seen here stays alive until we leave
        // (both sides SeqCst: if the leader read zero first, its clearing came before our load).
        team.busy.fetch_add(1, Ordering::SeqCst);
        let p = team.job.load(Ordering::SeqCst);
        if p.is_null() {
            // (that loop is over; a newer one published meanwhile is taken on the next turn)
            last = seq;
        } else {
            // SAFETY: see above; the job lives until `busy` drops back.
            let job = unsafe { &*p };
            last = job.seq;
            job.work(id);
        }
        team.busy.fetch_sub(1, Ordering::Release);
    }
}

/// `f(i)` for every `i` in `0..n`, in parallel: by the team's threads inside [`with_team`] (not
/// nested in one of its loops), else by rayon's. Returns when every call has returned; a panic
/// in any call is raised here again after the loop.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    let leading = LEADING.get();
    if n <= 1 || leading.is_null() || n >= u32::MAX as usize {
        if n == 1 {
            f(0);
        } else if n > 1 {
            (0..n).into_par_iter().for_each(&f);
        }
        return;
    }
    // SAFETY: `LEADING` points at a team on this thread's stack in `with_team`, which outlives
    // this call (it is cleared before the team is dropped).
    let team = unsafe { &*leading };
    let seq = team.seq.load(Ordering::Relaxed) + 1;
    let job = Job::new(&f, n, seq, team.parts);
    // SAFETY: the 'static is a lie the helpers never act on: they dereference the pointer only
    // while announced in `busy`, and this function waits for `busy` to read zero after clearing
    // the pointer, before `job` (and `f`) go out of scope.
    let p = &job as *const Job<'_> as *mut Job<'static>;
    team.job.store(p, Ordering::SeqCst);
    team.seq.store(seq, Ordering::Release);
    // Loops inside these calls run on rayon's loop (on this thread: the helpers are spinning).
    LEADING.set(std::ptr::null());
    job.work(0);
    let mut spins = 0;
    while job.done.load(Ordering::Acquire) < n {
        spins = pause(spins);
    }
    team.job.store(std::ptr::null_mut(), Ordering::SeqCst);
    while team.busy.load(Ordering::SeqCst) != 0 {
        spins = pause(spins);
    }
    LEADING.set(leading);
    if let Some(p) = job.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
        resume_unwind(p);
    }
}

/// One step of the leader's wait: a pause instruction, and after [`SPINS_BEFORE_YIELD`] of them
/// a yield to the OS each step too, so that a waiting thread still lets others run when there
/// are more threads than cores (it never sleeps, so it reacts within microseconds).
fn pause(spins: u32) -> u32 {
    if spins >= SPINS_BEFORE_YIELD {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
    spins.saturating_add(1)
}

/// One step of a helper's wait between loops: as [`pause`], but past the threshold it first
/// runs a job of its rayon pool if one is waiting. A helper holds a pool thread for the whole
/// of `with_team`, and rayon work queued meanwhile (a kernel's own rayon loop where a team
/// loop nests, another caller's work in a shared pool) may be what the leader waits for:
/// without this, two teams' helpers holding a 2-thread pool while both leaders wait for rayon
/// work would wait forever.
fn pause_helper(spins: u32) -> u32 {
    if spins >= SPINS_BEFORE_YIELD {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => return SPINS_BEFORE_YIELD,
            _ => std::thread::yield_now(),
        }
    } else {
        std::hint::spin_loop();
    }
    spins.saturating_add(1)
}

/// ~30-100 µs of pause instructions.
const SPINS_BEFORE_YIELD: u32 = 1 << 10;

/// [`for_each`] over the chunks of `data` (`chunk` values each, the last one shorter):
/// `f(i, chunk_i)`.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk = chunk.max(1);
    let len = data.len();
    let base = SendPtr(data.as_mut_ptr());
    for_each(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        let end = (start + chunk).min(len);
        // SAFETY: each index runs once; its range is disjoint from every other index's and
        // inside `data`, which is borrowed mutably for the whole loop.
        f(i, unsafe { base.slice(start, end) });
    });
}

/// [`for_each`] over consecutive parts of `data`: part `i` ends at `ends[i]` and starts where
/// part `i - 1` ended (0 for the first); `f(i, part_i)`.
///
/// # Panics
/// If `ends` decreases or goes past `data` (before any call).
pub fn for_each_part_mut<T: Send>(
    data: &mut [T],
    ends: &[usize],
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(
        ends.windows(2).all(|w| w[0] <= w[1]) && ends.last().is_none_or(|&e| e <= data.len()),
        "for_each_part_mut: ends must rise and stay inside the data"
    );
    let base = SendPtr(data.as_mut_ptr());
    for_each(ends.len(), |i| {
        let start = if i == 0 { 0 } else { ends[i - 1] };
        // SAFETY: as in `for_each_chunk_mut` (the parts are disjoint, checked above).
        f(i, unsafe { base.slice(start, ends[i]) });
    });
}

/// A raw pointer handed to the threads of a loop (the loop's contract makes the accesses disjoint).
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: used only for disjoint accesses (see the callers).
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// Values `start..end` from the pointer.
    ///
    /// # Safety
    /// The range is inside the allocation, and nothing else accesses it while the slice lives.
    unsafe fn slice<'a>(self, start: usize, end: usize) -> &'a mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), end - start) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    }

    /// Every index runs exactly once, in and out of a team, nested or not, with the work spread
    /// over the team's threads.
    #[test]
    fn every_index_once() {
        for threads in [1, 2, 3] {
            pool(threads).install(|| {
                let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
                let run = || {
                    for n in [0, 1, 2, 7, 1000] {
                        for_each(n, |i| {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                            // nested: rayon's loop, still once per index
                            for_each(3, |_| {});
                        });
                    }
                };
                run();
                with_team(run);
                with_team(|| with_team(run));
                for (i, h) in hits.iter().enumerate() {
                    let want =
                        3 * ([2, 7, 1000].iter().filter(|&&n| i < n).count() + usize::from(i < 1));
                    assert_eq!(
                        h.load(Ordering::Relaxed),
                        want,
                        "index {i}, {threads} threads"
                    );
                }
            });
        }
    }

    /// One participant alone runs every index once, in order within its own range, then the
    /// others' by halves (the ranges of participants that never came).
    #[test]
    fn a_lone_participant_steals_everything_once() {
        for parts in [1, 2, 3, 5, MAX_TEAM] {
            for n in [0, 1, 2, 3, 10, 97] {
                let order = Mutex::new(Vec::new());
                let f = |i: usize| order.lock().unwrap().push(i);
                let job = Job::new(&f, n, 1, parts);
                job.work(parts - 1);
                assert_eq!(job.done.load(Ordering::Relaxed), n);
                drop(job);
                let order = order.into_inner().unwrap();
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "parts {parts}, n {n}");
                // its own range first, ascending
                let own = n * (parts - 1) / parts..n;
                assert_eq!(order[..own.len()], own.collect::<Vec<_>>()[..]);
            }
        }
    }

    /// Many loops of uneven calls on three threads (more than this machine's cores, so
    /// participants are descheduled mid-range and their ranges stolen): each index once.
    #[test]
    fn uneven_loops_on_a_crowded_pool() {
        pool(3).install(|| {
            with_team(|| {
                for round in 0..300 {
                    let n = 1 + round % 37;
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    for_each(n, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                        std::hint::black_box((0..(i * 97 + round) % 3000).sum::<usize>());
                    });
                    assert!(
                        hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                        "round {round}"
                    );
                }
            })
        });
    }

    /// With two threads in the pool, a team's loops run on both (the helper takes indices).
    /// (Loops until it has, for up to a minute: under other tests' load the pool's second
    /// thread may start late.)
    #[test]
    fn helpers_take_indices() {
        pool(2).install(|| {
            let me = std::thread::current().id();
            let t0 = std::time::Instant::now();
            let other = AtomicUsize::new(0);
            let mut formed = false;
            while other.load(Ordering::Relaxed) == 0 && t0.elapsed().as_secs() < 60 {
                with_team(|| {
                    // (another test's team may exist: then this one runs rayon's loops; retry)
                    if LEADING.get().is_null() {
                        return;
                    }
                    formed = true;
                    for_each(64, |_| {
                        if std::thread::current().id() != me {
                            other.fetch_add(1, Ordering::Relaxed);
                        }
                        std::hint::black_box((0..2000).sum::<usize>());
                    });
                });
            }
            assert!(formed, "no team formed in a minute");
            assert!(
                other.load(Ordering::Relaxed) > 0,
                "no index ran on the helper"
            );
        });
    }

    /// A rayon call in a loop's body, on a helper, while another helper job is still queued (one
    /// pool thread was busy when the team formed): waiting in rayon, the helper may pick up that
    /// job; it must return instead of spinning inside the unfinished call. (Without the
    /// `IN_CALL` check in `helper`, 2 of 3 runs of this test hung within 4 attempts.) Each
    /// attempt runs on its own thread, with a 20 s watchdog.
    #[test]
    fn nested_rayon_in_a_helper_call_does_not_hang() {
        use std::sync::Arc;
        use std::time::Duration;
        for attempt in 0..30 {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let pool = pool(3);
                let gate = Arc::new(AtomicBool::new(false));
                let g = gate.clone();
                // one pool thread is busy elsewhere while the team forms
                pool.spawn(move || {
                    while !g.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_micros(200))
                    }
                });
                std::thread::sleep(Duration::from_millis(20));
                pool.install(|| {
                    let leader = std::thread::current().id();
                    let once = AtomicBool::new(false);
                    with_team(|| {
                        for_each(64, |_| {
                            if std::thread::current().id() != leader
                                && !once.swap(true, Ordering::AcqRel)
                            {
                                gate.store(true, Ordering::Release);
                                rayon::join(
                                    || std::thread::sleep(Duration::from_millis(30)),
                                    || std::thread::sleep(Duration::from_millis(30)),
                                );
                            } else {
                                std::thread::sleep(Duration::from_micros(300));
                            }
                        });
                    });
                    gate.store(true, Ordering::Release);
                });
                let _ = tx.send(());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(20)).is_ok(),
                "attempt {attempt}: hung"
            );
        }
    }

    #[test]
    fn chunks_are_disjoint_and_cover() {
        pool(2).install(|| {
            with_team(|| {
                let mut v = vec![0usize; 1003];
                for_each_chunk_mut(&mut v, 10, |i, c| {
                    assert!(c.len() == 10 || (i == 100 && c.len() == 3));
                    for (j, x) in c.iter_mut().enumerate() {
                        *x += i * 10 + j;
                    }
                });
                assert!(v.iter().enumerate().all(|(i, &x)| x == i));
            })
        });
    }

    /// A panic in a loop's call reaches the caller after the loop, and the team goes on.
    #[test]
    fn panics_reach_the_caller() {
        pool(2).install(|| {
            with_team(|| {
                let r = catch_unwind(|| {
                    for_each(50, |i| {
                        if i == 37 {
                            panic!("index 37");
                        }
                    })
                });
                let msg = r
                    .expect_err("the panic")
                    .downcast::<&str>()
                    .expect("a &str");
                assert_eq!(*msg, "index 37");
                let count = AtomicUsize::new(0);
                for_each(10, |_| {
                    count.fetch_add(1, Ordering::Relaxed);
                });
                assert_eq!(count.load(Ordering::Relaxed), 10);
            });
            // and a panic of the leader itself lets the helpers go
            let r = catch_unwind(|| with_team(|| panic!("leader")));
            assert!(r.is_err());
        });
    }
}
