//! `Embedder::embed_images`: files through `glm5v_prep` into the tower, one span per image.

use glm5v_prep::ImageSource;
use glm5v_reference::{EmbedOptions, Embedder, Grid};
use ndarray::Array2;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `pixel_values` and `image_grid_thw` from one of the prep fixtures (upstream's processor output).
fn upstream_pixels(name: &str) -> (Array2<f32>, Vec<Grid>) {
    let bytes = std::fs::read(root().join("fixtures/prep/expected").join(name)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let px = st.tensor("pixel_values").unwrap();
    let g: Vec<i64> = bytemuck::pod_collect_to_vec(st.tensor("image_grid_thw").unwrap().data());
    let grids = g
        .chunks(3)
        .map(|c| [c[0] as usize, c[1] as usize, c[2] as usize])
        .collect();
    let shape = px.shape().to_vec();
    (
        Array2::from_shape_vec(
            (shape[0], shape[1]),
            bytemuck::pod_collect_to_vec(px.data()),
        )
        .unwrap(),
        grids,
    )
}

#[test]
fn images_embed_as_upstream_pixels_do() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny");
    let emb = Embedder::load(&dir, EmbedOptions::default()).unwrap();
    let files = ["exact_112x112.png", "sliver_1x600.png", "jpeg_exif_6.jpg"];
    let sources: Vec<ImageSource> = files
        .iter()
        .map(|f| ImageSource::Path(root().join("fixtures/prep/images").join(f)))
        .collect();
    let out = emb.embed_images(&sources).unwrap();
    assert_eq!(out.items.len(), files.len());
    let mut offset = 0;
    for (item, file) in out.items.iter().zip(files) {
        let (px, grids) =
            upstream_pixels(&format!("{}.safetensors", file.rsplit_once('.').unwrap().0));
        assert_eq!(vec![item.grid], grids, "{file}");
        assert_eq!(item.token_offset, offset);
        let alone = emb.embed_pixels(px.view(), &grids).unwrap();
        assert_eq!(alone.embeddings.nrows(), item.token_count);
        let rows = out
            .embeddings
            .slice(ndarray::s![offset..offset + item.token_count, ..]);
        // packed and alone take different product kernels (row counts differ): f32-close
        let num: f32 = (&rows - &alone.embeddings).iter().map(|d| d * d).sum();
        let den: f32 = alone.embeddings.iter().map(|v| v * v).sum();
        let rel = (num / den).sqrt();
        assert!(rel < 1e-5, "{file}: packed vs alone relative L2 {rel:e}");
        assert_eq!(item.prompt.matches("<|image|>").count(), item.token_count);
        offset += item.token_count;
    }
    let missing = emb
        .embed_images(&[ImageSource::Path(root().join("no/such/file.png"))])
        .unwrap_err();
    assert!(missing.to_string().contains("file.png"), "{missing}");
}
