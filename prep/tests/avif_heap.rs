//! Decoding AVIF leaves nothing on the heap: the live bytes after 40 decodes of an alpha image,
//! a grid (five AV1 frames) and an image sequence equal those after the first round, within
//! 1 KiB. Finding F8 (LeakSanitizer, the `formats` fuzz target): rav1d 1.1.0's
//! `dav1d_picture_unref` and `dav1d_get_picture` left a freshly allocated `Arc` (48 bytes) in
//! every picture they released or did not fill, so each decoded AV1 frame leaked it
//! (`prep/rav1d/VENDORED.md`, change 5); before the fix this test saw 15,360 bytes grow over
//! the 40 rounds (384 a round: 48 bytes for each of the eight AV1 frames).
//! Its own test binary: the counting allocator sees only this test's threads.

use glm5v_prep::{DecodeOptions, ImageSource, load_image};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the bytes live now.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::SeqCst);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as isize, Ordering::SeqCst);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::SeqCst);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn decoding_avif_leaves_the_heap_as_it_found_it() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let files: Vec<(String, Vec<u8>)> = [
        "avif/alpha_420.avif",
        "avif_libavif/sofa_grid1x5_420.avif",
        "avif_libavif/colors-animated-8bpc.avif",
    ]
    .iter()
    .map(|f| (f.to_string(), std::fs::read(fixtures.join(f)).unwrap()))
    .collect();
    let opts = DecodeOptions::default();
    let round = || {
        for (name, bytes) in &files {
            let src = ImageSource::Bytes {
                name: name.clone(),
                bytes: bytes.clone(),
            };
            let img = load_image(&src, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(img.width() > 0, "{name}");
        }
    };
    // the first round's one-time allocations (lazy statics, the decoder's tables) stay
    round();
    let base = LIVE.load(Ordering::SeqCst);
    for _ in 0..40 {
        round();
    }
    let grown = LIVE.load(Ordering::SeqCst) - base;
    assert!(
        grown <= 1024,
        "the live heap grew by {grown} bytes over 40 rounds of {} AVIF decodes",
        files.len()
    );
}
