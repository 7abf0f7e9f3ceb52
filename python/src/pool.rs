//! The thread pool every call runs in, rebuilt in a forked child.
//!
//! rayon's global pool cannot be replaced, and after `fork()` (Python's `multiprocessing` with
//! the fork start method, as serving engines use for processor workers) its threads do not exist
//! in the child: the first parallel call there would wait forever. So calls run in a pool of our
//! own, remembered with the process id that built it; a child builds a new one on first use
//! (the parent's is forgotten, not dropped: its threads are the parent's). Size: `RAYON_NUM_THREADS`
//! when set, else one thread per core.

use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::{Arc, Mutex};

struct Owned {
    pid: u32,
    pool: Arc<ThreadPool>,
}

static POOL: Mutex<Option<Owned>> = Mutex::new(None);

fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// This process's pool.
pub fn pool() -> Result<Arc<ThreadPool>, String> {
    let pid = std::process::id();
    let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(o) = guard.as_ref()
        && o.pid == pid
    {
        return Ok(o.pool.clone());
    }
    if let Some(old) = guard.take() {
        std::mem::forget(old); // a forked child: the pool's threads are the parent's
    }
    let n = threads();
    let pool = ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("glm5v-py-{i}"))
        .build()
        .map_err(|e| format!("cannot start a pool of {n} threads: {e}"))?;
    let pool = Arc::new(pool);
    *guard = Some(Owned {
        pid,
        pool: pool.clone(),
    });
    Ok(pool)
}

/// Runs `f` in this process's pool.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, String> {
    Ok(pool()?.install(f))
}

/// Runs `f` in this process's pool with the GIL released.
pub fn detached<R: Send>(py: pyo3::Python<'_>, f: impl FnOnce() -> R + Send) -> pyo3::PyResult<R> {
    py.detach(|| run(f))
        .map_err(|e| crate::errors::raise("Glm5vError", e))
}
