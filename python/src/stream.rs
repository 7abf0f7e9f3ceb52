//! `Embedder.embed_many`: a stream of inputs through the library's batcher
//! (`glm5v_reference::{Batcher, Ordered}`), results in input order, one at a time.
//!
//! `Ordered` borrows its `Batcher`, so both live on a thread of their own (the stream's
//! worker), which sends each result over a bounded channel to the Python iterator
//! ([`EmbedStream`]); `__next__` waits on that channel with the GIL released. The worker pulls
//! the inputs from the Python iterator it was given (taking the GIL for each one) only as the
//! window of `Ordered` has room, so memory is bounded by the window, not by the input count.
//!
//! The batcher's worker thread runs the forward through [`PoolTower`], the caller's embedder
//! inside this package's thread pool (`pool.rs`): the same threads as `Embedder.embed`, and
//! rebuilt in a forked child.

use crate::errors::raise;
use glm5v_prep::ImageSource;
use glm5v_reference::{
    Batcher, BatcherOptions, Embedder, Finished, Grid, Ordered, QueuedTower, TapSink, Ticket,
    Tower, TowerError, VisionConfig,
};
use ndarray::{Array2, ArrayView2};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyTuple};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

/// Results sent ahead of the consumer (each holds one input's embeddings).
const CHANNEL: usize = 4;

/// A tower that runs another embedder's tower in this package's pool (and, when that embedder
/// owns a pool, in that one, as `Embedder::embed_pixels` does).
pub struct PoolTower(pub Arc<Embedder>);

fn pooled<R: Send>(
    e: &Embedder,
    f: impl FnOnce(&dyn Tower) -> Result<R, TowerError> + Send,
) -> Result<R, TowerError> {
    crate::pool::run(|| e.install(|| f(e.tower()))).map_err(|message| TowerError::Backend {
        backend: "glm5v (python)".into(),
        message,
    })?
}

impl Tower for PoolTower {
    fn queued(&self) -> Option<&dyn QueuedTower> {
        // a GPU's queue, its calls run in this package's pool too
        self.0.tower().queued().map(|_| self as &dyn QueuedTower)
    }
    fn config(&self) -> &VisionConfig {
        self.0.config()
    }
    fn describe(&self) -> String {
        self.0.tower().describe()
    }
    fn patch_embed(&self, pixel_values: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        pooled(&self.0, |t| t.patch_embed(pixel_values))
    }
    fn rope(&self, grid_thw: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError> {
        pooled(&self.0, |t| t.rope(grid_thw))
    }
    fn block(
        &self,
        index: usize,
        hidden: ArrayView2<f32>,
        cos: ArrayView2<f32>,
        sin: ArrayView2<f32>,
        cu_seqlens: &[usize],
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        pooled(&self.0, |t| {
            t.block(index, hidden, cos, sin, cu_seqlens, taps)
        })
    }
    fn post_norm(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        pooled(&self.0, |t| t.post_norm(hidden))
    }
    fn downsample(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        pooled(&self.0, |t| t.downsample(hidden))
    }
    fn merger(
        &self,
        x: ArrayView2<f32>,
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        pooled(&self.0, |t| t.merger(x, taps))
    }
    fn forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        // the backend's own forward (the CPU's and the GPU's override the stage composition)
        pooled(&self.0, |t| t.forward(pixel_values, grid_thw, taps))
    }
}

fn queue(t: &dyn Tower) -> Result<&dyn QueuedTower, TowerError> {
    t.queued().ok_or_else(|| TowerError::Backend {
        backend: "glm5v (python)".into(),
        message: "the tower queues no forwards".into(),
    })
}

impl QueuedTower for PoolTower {
    fn depth(&self) -> usize {
        self.0.tower().queue_depth()
    }
    fn reserve(&self, rows: usize) -> Result<bool, TowerError> {
        pooled(&self.0, |t| queue(t)?.reserve(rows))
    }
    fn enqueue(
        &self,
        rows: usize,
        grid_thw: &[Grid],
        fill: &mut (dyn FnMut(&mut [f32]) + Send),
    ) -> Result<Ticket, TowerError> {
        pooled(&self.0, |t| queue(t)?.enqueue(rows, grid_thw, fill))
    }
    fn finish(&self, ticket: Ticket) -> Result<Finished, TowerError> {
        pooled(&self.0, |t| queue(t)?.finish(ticket))
    }
}

/// What the worker sends.
enum Msg {
    /// One input's result: `(index, input name, (embeddings, grid, inputs in its forward) or
    /// the error's text)`.
    Item(usize, String, Result<(Array2<f32>, Grid, usize), String>),
    /// The input iterator raised: re-raised after the results before it.
    Raised(PyErr),
    /// The batcher could not start: `(exception class, message)`.
    Failed(&'static str, String),
}

/// Per input (by index), what the Python side said of it: its name, and an error that replaces
/// the batcher's (an input of a kind `embed_many` does not take).
type Meta = Rc<RefCell<HashMap<usize, (String, Option<String>)>>>;

/// The inputs, pulled from the Python iterator one at a time with the GIL. Each item is a
/// tagged tuple made by `glm5v.embedder._stream_items`: `("path", name, str)`,
/// `("uri", name, str)`, `("bytes", name, bytes)` or `("error", name, message)`.
struct PyInputs {
    iter: Option<Py<PyIterator>>,
    stop: Arc<AtomicBool>,
    index: usize,
    meta: Meta,
    raised: Rc<RefCell<Option<PyErr>>>,
}

fn source_of(item: &Bound<'_, PyAny>) -> PyResult<(ImageSource, String, Option<String>)> {
    let t = item.cast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    let name: String = t.get_item(1)?.extract()?;
    let payload = t.get_item(2)?;
    Ok(match kind.as_str() {
        "path" => (
            ImageSource::Path(payload.extract::<std::path::PathBuf>()?),
            name,
            None,
        ),
        "uri" => (ImageSource::DataUri(payload.extract()?), name, None),
        "bytes" => {
            let bytes = payload.cast::<PyBytes>()?.as_bytes().to_vec();
            let src = ImageSource::Bytes {
                name: name.clone(),
                bytes,
            };
            (src, name, None)
        }
        _ => {
            let message: String = payload.extract()?;
            // an empty file: refused by the header read, before the batcher; the message is ours
            let src = ImageSource::Bytes {
                name: name.clone(),
                bytes: Vec::new(),
            };
            (src, name, Some(message))
        }
    })
}

impl Iterator for PyInputs {
    type Item = ImageSource;

    fn next(&mut self) -> Option<ImageSource> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let iter = self.iter.as_ref()?;
        let got = Python::attach(|py| -> PyResult<Option<_>> {
            let mut it = iter.bind(py).clone();
            match it.next() {
                None => Ok(None),
                Some(item) => source_of(&item?).map(Some),
            }
        });
        match got {
            Ok(Some((src, name, error))) => {
                self.meta.borrow_mut().insert(self.index, (name, error));
                self.index += 1;
                Some(src)
            }
            Ok(None) => {
                self.release();
                None
            }
            Err(e) => {
                *self.raised.borrow_mut() = Some(e);
                self.release();
                None
            }
        }
    }
}

impl PyInputs {
    /// Drops the Python iterator with the GIL (it may hold open files, a generator frame).
    fn release(&mut self) {
        if let Some(it) = self.iter.take() {
            Python::attach(|_| drop(it));
        }
    }
}

/// The stream's thread: the batcher, the ordered window, results to `tx` until the inputs end
/// or the consumer goes away.
fn work(
    embedder: Arc<Embedder>,
    iter: Py<PyIterator>,
    options: BatcherOptions,
    window: (usize, usize),
    tx: SyncSender<Msg>,
    stop: Arc<AtomicBool>,
) {
    let batcher = match Batcher::new(vec![embedder], options) {
        Ok(b) => b,
        Err(e) => {
            let _ = tx.send(Msg::Failed("OptionsError", e.to_string()));
            if !stop.load(Ordering::Relaxed) {
                Python::attach(|_| drop(iter));
            }
            return;
        }
    };
    let meta: Meta = Rc::default();
    let raised = Rc::new(RefCell::new(None));
    let inputs = PyInputs {
        iter: Some(iter),
        stop: stop.clone(),
        index: 0,
        meta: meta.clone(),
        raised: raised.clone(),
    };
    let mut ordered = Ordered::new(&batcher, inputs, window.0, window.1);
    for item in ordered.by_ref() {
        let (name, ours) = meta.borrow_mut().remove(&item.index).unwrap_or_default();
        let result = match (ours, item.result) {
            (Some(message), _) => Err(message),
            // to_owned: a fresh array of exactly these rows (into_owned of the last view of a
            // batch keeps the batch's whole buffer, its rows at an offset)
            (None, Ok(out)) => Ok((out.embeddings.to_owned(), out.grid, out.batch_items)),
            (None, Err(e)) => Err(e.to_string()),
        };
        if tx.send(Msg::Item(item.index, name, result)).is_err() {
            stop.store(true, Ordering::Relaxed);
            break;
        }
    }
    if let Some(e) = raised.borrow_mut().take() {
        let _ = tx.send(Msg::Raised(e));
    }
    // the batcher finishes what is in flight (bounded by the window) and stops its threads;
    // the Python iterator, when the consumer left early, is dropped without the GIL (pyo3
    // defers its reference count to the next time a thread holds it)
    drop(ordered);
    drop(batcher);
}

/// `embed_many`'s iterator: `(index, input, grid or None, embeddings or None, error or None,
/// inputs in its forward or None)` per input, in input order.
#[pyclass(frozen, module = "glm5v._glm5v")]
pub struct EmbedStream {
    rx: Mutex<Option<Receiver<Msg>>>,
    stop: Arc<AtomicBool>,
}

/// One result as Python sees it.
type ItemTuple<'py> = (
    usize,
    String,
    Option<[usize; 3]>,
    Option<Bound<'py, PyAny>>,
    Option<String>,
    Option<usize>,
);

impl EmbedStream {
    /// Starts the worker over `iter` (the tagged tuples).
    pub fn start(
        embedder: Arc<Embedder>,
        iter: Py<PyIterator>,
        options: BatcherOptions,
        window: (usize, usize),
    ) -> PyResult<Self> {
        let (tx, rx) = sync_channel(CHANNEL);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::Builder::new()
            .name("glm5v-embed-many".into())
            .spawn(move || work(embedder, iter, options, window, tx, s))
            .map_err(|e| raise("Glm5vError", format!("cannot start a thread: {e}")))?;
        Ok(EmbedStream {
            rx: Mutex::new(Some(rx)),
            stop,
        })
    }

    fn shut(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // dropping the receiver ends the worker's next send
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

#[pymethods]
impl EmbedStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<ItemTuple<'py>>> {
        let msg = py.detach(|| {
            let guard = self.rx.lock().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().and_then(|rx| rx.recv().ok())
        });
        match msg {
            None => {
                self.shut();
                Ok(None)
            }
            Some(Msg::Item(index, name, Ok((emb, grid, batch_items)))) => {
                let (rows, cols) = emb.dim();
                let flat = if emb.is_standard_layout() {
                    emb.into_raw_vec_and_offset().0
                } else {
                    emb.iter().copied().collect()
                };
                let arr = PyArray1::from_vec(py, flat).reshape([rows, cols])?;
                let arr = Some(arr.into_any());
                Ok(Some((
                    index,
                    name,
                    Some(grid),
                    arr,
                    None,
                    Some(batch_items),
                )))
            }
            Some(Msg::Item(index, name, Err(message))) => {
                Ok(Some((index, name, None, None, Some(message), None)))
            }
            Some(Msg::Raised(e)) => {
                self.shut();
                Err(e)
            }
            Some(Msg::Failed(class, message)) => {
                self.shut();
                Err(raise(class, message))
            }
        }
    }

    /// Stops the stream: no more inputs are pulled; what is in flight finishes in the
    /// background and is dropped.
    fn close(&self) {
        self.shut();
    }
}

impl Drop for EmbedStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
