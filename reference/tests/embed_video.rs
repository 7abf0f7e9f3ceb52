//! `Embedder::embed_media`: images then video files in one packed batch (`video` feature). The
//! video's rows are upstream's `pixel_values_videos` (checked bit for bit in glm5v-prep's
//! `video_files` test); here: the batch is the images' rows then each video's, with one span per
//! item whose token count is its grid's, and the embeddings equal `embed_pixels` on that batch.
#![cfg(feature = "video")]

use glm5v_prep::{ImageSource, PixelBatch, prep_images, prep_video_file, push_video};
use glm5v_reference::{EmbedOptions, Embedder, Grid};
use ndarray::ArrayView2;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn images_then_videos_in_one_batch() {
    let e = Embedder::load(&root().join("fixtures/tower/tiny"), EmbedOptions::default()).unwrap();
    let img = ImageSource::from_arg(
        &root()
            .join("fixtures/tower/inputs/scene_112x140.png")
            .display()
            .to_string(),
    );
    let v1 = root().join("fixtures/video/clips/av1_64x48.mkv");
    let v2 = root().join("fixtures/video/clips/h264_odd_sampled_56x42.mp4");
    let out = e
        .embed_media(std::slice::from_ref(&img), &[v1.as_path(), v2.as_path()])
        .unwrap();

    let o = e.prep_options();
    let mut b: PixelBatch = prep_images(std::slice::from_ref(&img), o).unwrap();
    let a = prep_video_file(&v1, o).unwrap();
    let c = prep_video_file(&v2, o).unwrap();
    push_video(&mut b, &a);
    push_video(&mut b, &c);
    let mut rows = b.pixel_values.clone();
    rows.extend_from_slice(&b.pixel_values_videos);
    let n = rows.len() / 1176;
    let grids: Vec<Grid> = b
        .image_grid_thw
        .iter()
        .chain(&b.video_grid_thw)
        .map(|g| g.map(|v| v as usize))
        .collect();
    let want = e
        .embed_pixels(ArrayView2::from_shape((n, 1176), &rows).unwrap(), &grids)
        .unwrap();
    assert_eq!(out.embeddings, want.embeddings);
    assert_eq!(out.items.len(), 3);
    for (item, g) in out.items.iter().zip(&grids) {
        assert_eq!(item.grid, *g);
        assert_eq!(item.token_count, g[0] * g[1] * g[2] / 4);
    }
    assert_eq!(grids[1], a.grid_thw);
    assert_eq!(grids[2], [3, 4, 6]); // 5 sampled frames + the last repeated: 3 pairs
}
