//! [`Ordered`]: a stream of inputs through the batcher, results in input order, memory bounded
//! by a window (the corpus pipeline: `glm5v embed`, Python's `embed_many`).

use super::{Batcher, CancelToken, JobError, JobResult};
use glm5v_prep::{ImageSource, Plan};
use std::collections::HashMap;
use std::sync::mpsc;

/// One input's result in an [`Ordered`] stream.
#[derive(Debug)]
pub struct OrderedItem {
    /// Its place in the input order.
    pub index: usize,
    /// The header's price, when the header could be read.
    pub plan: Option<Plan>,
    pub result: JobResult,
}

/// A stream of inputs through a [`Batcher`], results in input order, with at most
/// `window_tokens` merged tokens and `window_items` inputs between the oldest not yet yielded
/// and the newest submitted: memory is bounded by the window, not by the number of inputs.
pub struct Ordered<'b, I: Iterator<Item = ImageSource>> {
    batcher: &'b Batcher,
    inputs: std::iter::Fuse<I>,
    next_index: usize,
    next_out: usize,
    held_tokens: usize,
    window_tokens: usize,
    window_items: usize,
    done: HashMap<usize, OrderedItem>,
    plans: HashMap<usize, Plan>,
    tx: mpsc::Sender<(usize, JobResult)>,
    rx: mpsc::Receiver<(usize, JobResult)>,
}

impl<'b, I: Iterator<Item = ImageSource>> Ordered<'b, I> {
    /// `window_tokens` is raised to the batcher's `max_batch_tokens` when smaller (one forward
    /// must fit); `window_items` to 1.
    pub fn new(batcher: &'b Batcher, inputs: I, window_tokens: usize, window_items: usize) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            batcher,
            inputs: inputs.fuse(),
            next_index: 0,
            next_out: 0,
            held_tokens: 0,
            window_tokens: window_tokens.max(batcher.options().max_batch_tokens),
            window_items: window_items.max(1),
            done: HashMap::new(),
            plans: HashMap::new(),
            tx,
            rx,
        }
    }

    /// Submits inputs while the window has room.
    fn fill(&mut self) {
        while self.next_index - self.next_out < self.window_items
            && self.held_tokens < self.window_tokens
        {
            let Some(src) = self.inputs.next() else {
                return;
            };
            let index = self.next_index;
            self.next_index += 1;
            let plan = match self.batcher.plan(&src) {
                Ok(p) => p,
                Err(e) => {
                    let item = OrderedItem {
                        index,
                        plan: None,
                        result: Err(JobError::Input(e)),
                    };
                    self.done.insert(index, item);
                    continue;
                }
            };
            let tokens = plan.tokens;
            self.held_tokens += tokens;
            self.plans.insert(index, plan);
            let tx = self.tx.clone();
            self.batcher
                .submit(src, tokens, CancelToken::new(), move |r| {
                    let _ = tx.send((index, r));
                });
        }
    }
}

impl<I: Iterator<Item = ImageSource>> Iterator for Ordered<'_, I> {
    type Item = OrderedItem;

    fn next(&mut self) -> Option<OrderedItem> {
        loop {
            self.fill();
            if let Some(mut item) = self.done.remove(&self.next_out) {
                self.next_out += 1;
                if let Some(plan) = self.plans.remove(&item.index) {
                    self.held_tokens -= plan.tokens;
                    item.plan = Some(plan);
                }
                return Some(item);
            }
            if self.next_out == self.next_index {
                return None; // nothing held, and fill found no more inputs
            }
            let (index, result) = self.rx.recv().expect("the stream holds a sender");
            let item = OrderedItem {
                index,
                plan: None,
                result,
            };
            self.done.insert(index, item);
        }
    }
}
