//! The batcher against the embedder: every input's rows bit-identical to embedding it alone,
//! whatever it was packed with (random packings, both CPU precisions), errors per input, cancel,
//! the budget, ordered streams, shutdown.

use glm5v_prep::ImageSource;
use glm5v_reference::{
    BatchObserver, BatchReport, Batcher, BatcherOptions, CancelToken, EmbedOptions, Embedder,
    Finished, Grid, JobError, JobResult, Ordered, Precision, QueuedTower, TapSink, Threads, Ticket,
    Tower, TowerError, VisionConfig,
};
use ndarray::{Array2, ArrayRef2, ArrayView2};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tiny(precision: Precision) -> Arc<Embedder> {
    let options = EmbedOptions {
        precision,
        threads: Threads::Count(2),
    };
    Arc::new(Embedder::load(&root().join("fixtures/tower/tiny"), options).expect("tiny loads"))
}

/// Fixture images of several formats and sizes (16 to 300 tokens on the tiny model's processor).
fn images() -> Vec<ImageSource> {
    let r = root();
    let mut v: Vec<ImageSource> = [
        "fixtures/tower/inputs/scene_112x140.png",
        "fixtures/tower/inputs/scene_140x112.png",
        "fixtures/tower/inputs/packed_56x224.png",
        "fixtures/tower/inputs/long_252x224.png",
        "fixtures/prep/images/jpeg_exif_6.jpg",
        "fixtures/prep/images/tiny_1x1.png",
        "fixtures/prep/images/webp_lossy.webp",
        "fixtures/prep/images/gif_transparent.gif",
        "fixtures/prep/images/sliver_1x600.png",
        "fixtures/prep/images/png_palette_alpha.png",
    ]
    .iter()
    .map(|p| ImageSource::Path(r.join(p)))
    .collect();
    let bytes = std::fs::read(r.join("fixtures/prep/images/jpeg_q75.jpg")).unwrap();
    v.push(ImageSource::Bytes {
        name: "jpeg_q75 bytes".into(),
        bytes,
    });
    v
}

fn alone(e: &Embedder, src: &ImageSource) -> Array2<f32> {
    e.embed_images(std::slice::from_ref(src))
        .expect("fixture embeds")
        .embeddings
}

fn same_bits(a: &ArrayRef2<f32>, b: &ArrayRef2<f32>) -> bool {
    a.dim() == b.dim() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn run_all(batcher: &Batcher, srcs: &[ImageSource]) -> Vec<JobResult> {
    let (tx, rx) = mpsc::channel();
    for (i, s) in srcs.iter().enumerate() {
        let tokens = batcher.plan(s).expect("fixture header").tokens;
        let tx = tx.clone();
        batcher.submit(s.clone(), tokens, CancelToken::new(), move |r| {
            tx.send((i, r)).unwrap();
        });
    }
    drop(tx);
    let mut out: Vec<Option<JobResult>> = (0..srcs.len()).map(|_| None).collect();
    for (i, r) in rx {
        assert!(out[i].is_none(), "input {i} answered twice");
        out[i] = Some(r);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| panic!("input {i} never answered")))
        .collect()
}

/// Submits every source, priced from its header; each answer sends whether it succeeded. The
/// sender is returned too, for a caller that submits more.
fn submit_all(
    batcher: &Batcher,
    srcs: &[ImageSource],
) -> (mpsc::Sender<bool>, mpsc::Receiver<bool>) {
    let (tx, rx) = mpsc::channel();
    for s in srcs {
        let tokens = batcher.plan(s).unwrap().tokens;
        let tx = tx.clone();
        batcher.submit(s.clone(), tokens, CancelToken::new(), move |r| {
            tx.send(r.is_ok()).unwrap()
        });
    }
    (tx, rx)
}

/// Random packings through the embedder directly (each packing a known composition) and through
/// the batcher (whatever it packs), both precisions: every input's rows are the same bits.
#[test]
fn rows_are_batch_invariant() {
    let srcs = images();
    for precision in [Precision::F32, Precision::Bf16] {
        let e = tiny(precision);
        let reference: Vec<Array2<f32>> = srcs.iter().map(|s| alone(&e, s)).collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261203);
        for round in 0..6 {
            let mut order: Vec<usize> = (0..srcs.len()).collect();
            order.shuffle(&mut rng);
            order.truncate(rng.random_range(2..=srcs.len()));
            let packed: Vec<ImageSource> = order.iter().map(|&i| srcs[i].clone()).collect();
            let out = e.embed_images(&packed).expect("packed embeds");
            for (k, (&i, span)) in order.iter().zip(&out.items).enumerate() {
                let rows = out
                    .embeddings
                    .slice(ndarray::s![
                        span.token_offset..span.token_offset + span.token_count,
                        ..
                    ])
                    .to_owned();
                assert!(
                    same_bits(&rows, &reference[i]),
                    "{}: round {round}, input {i} at place {k} of {}: rows differ from alone",
                    precision.name(),
                    order.len()
                );
            }
        }
        let largest = reference.iter().map(|r| r.nrows()).max().unwrap();
        for budget in [largest, 3 * largest, 4096] {
            let batcher = Batcher::new(vec![e.clone()], BatcherOptions::new(budget, 2)).unwrap();
            let mut twice: Vec<usize> = (0..srcs.len()).chain(0..srcs.len()).collect();
            twice.shuffle(&mut rng);
            let packed: Vec<ImageSource> = twice.iter().map(|&i| srcs[i].clone()).collect();
            let results = run_all(&batcher, &packed);
            let mut widest = 0;
            for (&i, r) in twice.iter().zip(results) {
                let out = r.unwrap_or_else(|e| panic!("input {i}: {e}"));
                assert!(out.batch_tokens <= budget);
                widest = widest.max(out.batch_items);
                assert!(
                    same_bits(&out.embeddings, &reference[i]),
                    "{}: budget {budget}: input {i} differs from alone",
                    precision.name()
                );
            }
            if budget > largest {
                assert!(widest > 1, "budget {budget}: nothing was packed");
            }
            assert!(batcher.stats().batches >= 1);
        }
    }
}

/// A bad input fails alone with its decoder's error; the others in the same stream are right.
#[test]
fn bad_inputs_fail_alone() {
    let e = tiny(Precision::F32);
    let batcher = Batcher::new(vec![e.clone()], BatcherOptions::new(4096, 2)).unwrap();
    let good = images();
    // a PNG cut after its header: priced from the header, fails when decoded
    let full = std::fs::read(root().join("fixtures/tower/inputs/scene_112x140.png")).unwrap();
    let cut = ImageSource::Bytes {
        name: "cut.png".into(),
        bytes: full[..full.len() / 2].to_vec(),
    };
    let tokens = batcher.plan(&cut).expect("the header is whole").tokens;
    let (tx, rx) = mpsc::channel();
    batcher.submit(cut, tokens, CancelToken::new(), move |r| {
        tx.send(r).unwrap()
    });
    let err = rx.recv().unwrap().expect_err("a cut PNG fails");
    assert!(
        matches!(err, JobError::Input(_)) && err.to_string().contains("cut.png"),
        "{err}"
    );
    let results = run_all(&batcher, &good);
    for (s, r) in good.iter().zip(results) {
        assert!(same_bits(&r.expect("good input").embeddings, &alone(&e, s)));
    }
    assert!(!batcher.is_broken());
}

#[test]
fn over_budget_and_cancelled_inputs_never_run() {
    let e = tiny(Precision::F32);
    let batcher = Batcher::new(vec![e], BatcherOptions::new(20, 1)).unwrap();
    let big = ImageSource::Path(root().join("fixtures/tower/inputs/long_252x224.png"));
    let tokens = batcher.plan(&big).unwrap().tokens;
    assert!(tokens > 20);
    let (tx, rx) = mpsc::channel();
    let t2 = tx.clone();
    batcher.submit(big, tokens, CancelToken::new(), move |r| {
        t2.send(r).unwrap()
    });
    match rx.recv().unwrap() {
        Err(JobError::TooLarge {
            tokens: t,
            max_batch_tokens: 20,
        }) => assert_eq!(t, tokens),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // allowed to run alone, it runs alone and gives the same rows
    let e = tiny(Precision::F32);
    let mut o = BatcherOptions::new(20, 1);
    o.solo_over_budget = true;
    let solo = Batcher::new(vec![e.clone()], o).unwrap();
    let big = ImageSource::Path(root().join("fixtures/tower/inputs/long_252x224.png"));
    let small = ImageSource::Path(root().join("fixtures/tower/inputs/scene_112x112.png"));
    let results = run_all(&solo, &[small.clone(), big.clone(), small.clone()]);
    for (r, s) in results.into_iter().zip([&small, &big, &small]) {
        let out = r.expect("runs");
        assert!(same_bits(&out.embeddings, &alone(&e, s)));
        if out.tokens() > 20 {
            assert_eq!(out.batch_items, 1);
        }
    }
    let small = ImageSource::Path(root().join("fixtures/tower/inputs/scene_112x112.png"));
    let tokens = batcher.plan(&small).unwrap().tokens;
    let cancel = CancelToken::new();
    cancel.cancel();
    batcher.submit(small, tokens, cancel, move |r| tx.send(r).unwrap());
    assert!(matches!(rx.recv().unwrap(), Err(JobError::Cancelled)));
    assert_eq!(batcher.stats().dropped, 1);
    assert_eq!(batcher.stats().batches, 0);
}

/// An ordered stream gives input order with a small window, errors in place, and the same rows.
#[test]
fn ordered_stream_keeps_input_order() {
    let e = tiny(Precision::F32);
    let batcher = Batcher::new(vec![e.clone()], BatcherOptions::new(128, 2)).unwrap();
    let mut srcs = images();
    srcs.insert(
        3,
        ImageSource::Bytes {
            name: "empty".into(),
            bytes: Vec::new(),
        },
    );
    let many: Vec<ImageSource> = srcs.iter().cycle().take(srcs.len() * 3).cloned().collect();
    let items: Vec<_> = Ordered::new(&batcher, many.clone().into_iter(), 128, 4).collect();
    assert_eq!(items.len(), many.len());
    for (k, (item, src)) in items.iter().zip(&many).enumerate() {
        assert_eq!(item.index, k);
        match (&item.result, src) {
            (Err(e), ImageSource::Bytes { name, .. }) if name == "empty" => {
                assert!(e.to_string().contains("empty"), "{e}");
                assert!(item.plan.is_none());
            }
            (Ok(out), src) => {
                assert_eq!(item.plan.as_ref().unwrap().tokens, out.tokens());
                assert!(same_bits(&out.embeddings, &alone(&e, src)), "input {k}");
            }
            (Err(e), _) => panic!("input {k}: {e}"),
        }
    }
}

#[test]
fn shutdown_finishes_what_was_submitted_and_refuses_the_rest() {
    let e = tiny(Precision::F32);
    let batcher = Batcher::new(vec![e], BatcherOptions::new(4096, 2)).unwrap();
    let srcs = images();
    let (tx, rx) = submit_all(&batcher, &srcs);
    batcher.shutdown();
    let ok: Vec<bool> = rx.try_iter().collect();
    assert_eq!(ok, vec![true; srcs.len()]);
    batcher.submit(srcs[0].clone(), 20, CancelToken::new(), move |r| {
        tx.send(matches!(r, Err(JobError::ShutDown))).unwrap()
    });
    assert!(rx.recv().unwrap());
    assert_eq!(batcher.in_flight(), 0);
}

/// Inputs submitted the moment the batcher starts, many times over, with more decoders than
/// cores: every one is answered. Decoders once ran their loops inside their rayon pool, and a
/// pool thread waiting in a decode's parallel loop could take a loop not yet started and never
/// return from it (the input then hung for good; seen on two cores, about one start in a few).
/// A hang fails here after 60 s instead of stalling the suite.
#[test]
fn inputs_at_start_up_are_answered() {
    let e = tiny(Precision::F32);
    let srcs = images();
    for round in 0..40 {
        let batcher = Batcher::new(vec![e.clone()], BatcherOptions::new(4096, 4)).unwrap();
        let (tx, rx) = submit_all(&batcher, &srcs);
        drop(tx);
        for k in 0..srcs.len() {
            let ok = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "round {round}: input {k} of {} unanswered after 60 s",
                        srcs.len()
                    )
                });
            assert!(ok, "round {round}: a fixture failed");
        }
        batcher.shutdown();
    }
}

/// The CPU tower behind a queue of forwards run on threads of their own, as a GPU queues them
/// on its streams: the batcher's queued worker (the GPU's path) must give every input the rows
/// it gets alone, keep at most the queue's depth of forwards queued, and report the device time.
#[derive(Clone)]
struct QueuedCpu {
    inner: Arc<glm5v_reference::CpuTower<f32>>,
    jobs: Arc<std::sync::Mutex<HashMap<u64, std::thread::JoinHandle<Array2<f32>>>>>,
    next: Arc<AtomicU64>,
    most_queued: Arc<AtomicUsize>,
}

impl Tower for QueuedCpu {
    fn queued(&self) -> Option<&dyn QueuedTower> {
        Some(self)
    }
    fn config(&self) -> &VisionConfig {
        self.inner.config()
    }
    fn describe(&self) -> String {
        "queued cpu".into()
    }
    fn patch_embed(&self, x: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        self.inner.patch_embed(x)
    }
    fn rope(&self, g: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError> {
        self.inner.rope(g)
    }
    fn block(
        &self,
        i: usize,
        x: ArrayView2<f32>,
        cos: ArrayView2<f32>,
        sin: ArrayView2<f32>,
        cu: &[usize],
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        self.inner.block(i, x, cos, sin, cu, taps)
    }
    fn post_norm(&self, x: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        self.inner.post_norm(x)
    }
    fn downsample(&self, x: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        self.inner.downsample(x)
    }
    fn merger(
        &self,
        x: ArrayView2<f32>,
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        self.inner.merger(x, taps)
    }
}

impl QueuedTower for QueuedCpu {
    fn depth(&self) -> usize {
        2
    }
    fn enqueue(
        &self,
        rows: usize,
        grids: &[Grid],
        fill: &mut (dyn FnMut(&mut [f32]) + Send),
    ) -> Result<Ticket, TowerError> {
        let mut jobs = self.jobs.lock().unwrap();
        assert!(jobs.len() < 2, "the batcher queued more than the depth");
        let p = self.inner.config().patch_dim();
        let mut px = vec![f32::NAN; rows * p];
        fill(&mut px);
        let t = self.next.fetch_add(1, Ordering::Relaxed);
        let (grids, inner) = (grids.to_vec(), self.inner.clone());
        jobs.insert(
            t,
            std::thread::spawn(move || {
                let x = Array2::from_shape_vec((rows, p), px).unwrap();
                inner.forward(x.view(), &grids, None).unwrap()
            }),
        );
        self.most_queued.fetch_max(jobs.len(), Ordering::Relaxed);
        Ok(Ticket(t))
    }
    fn finish(&self, t: Ticket) -> Result<Finished, TowerError> {
        let job = self
            .jobs
            .lock()
            .unwrap()
            .remove(&t.0)
            .expect("a queued ticket");
        let started = Instant::now();
        let embeddings = job.join().unwrap();
        Ok(Finished {
            embeddings,
            device: started.elapsed().max(Duration::from_nanos(1)),
            upload: Duration::ZERO,
        })
    }
}

#[test]
fn queued_towers_give_each_input_its_rows() {
    let srcs = images();
    let e = tiny(Precision::F32);
    let reference: Vec<Array2<f32>> = srcs.iter().map(|s| alone(&e, s)).collect();
    let tiny_dir = root().join("fixtures/tower/tiny");
    let queued = QueuedCpu {
        inner: Arc::new(glm5v_reference::CpuTower::load(&tiny_dir, false).unwrap()),
        jobs: Default::default(),
        next: Default::default(),
        most_queued: Default::default(),
    };
    let qe = Embedder::from_tower(Box::new(queued.clone()), Threads::Count(2)).unwrap();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let r2 = reports.clone();
    let observer: BatchObserver = Arc::new(move |r: &BatchReport| r2.lock().unwrap().push(*r));
    let largest = reference.iter().map(|r| r.nrows()).max().unwrap();
    let options = BatcherOptions::new(2 * largest, 2);
    let batcher = Batcher::with_observer(vec![Arc::new(qe)], options, Some(observer)).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261206);
    let mut order: Vec<usize> = (0..3 * srcs.len()).map(|i| i % srcs.len()).collect();
    order.shuffle(&mut rng);
    let packed: Vec<ImageSource> = order.iter().map(|&i| srcs[i].clone()).collect();
    let results = run_all(&batcher, &packed);
    for (&i, r) in order.iter().zip(results) {
        let out = r.unwrap_or_else(|e| panic!("input {i}: {e}"));
        assert!(out.batch_tokens <= 2 * largest);
        assert!(
            same_bits(&out.embeddings, &reference[i]),
            "input {i} differs from alone through the queue"
        );
    }
    let reports = reports.lock().unwrap();
    assert!(
        reports
            .iter()
            .all(|r| r.device.is_some_and(|d| !d.is_zero()))
    );
    let items: usize = reports.iter().map(|r| r.items).sum();
    assert_eq!(items, order.len(), "every input ran in exactly one forward");
    let most = queued.most_queued.load(Ordering::Relaxed);
    assert_eq!(
        most, 2,
        "forwards queued at once at most: the queue was never two deep"
    );
    batcher.shutdown();
    assert_eq!(batcher.stats().running, 0);
}
