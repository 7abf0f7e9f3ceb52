//! The preprocessed-inputs file (TAPS.md section 3): write, read, and the reader's checks.

use glm5v_prep::{PixelBatch, read_prep_safetensors, write_prep_safetensors};
use safetensors::{Dtype, tensor::TensorView};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glm5v-prep-batch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn values(rows: usize, dim: usize, salt: f32) -> Vec<f32> {
    (0..rows * dim).map(|i| i as f32 * 0.5 - salt).collect()
}

fn sample() -> PixelBatch {
    PixelBatch {
        patch_dim: 12,
        pixel_values: values(4 + 8, 12, 1.0),
        image_grid_thw: vec![[1, 2, 2], [1, 2, 4]],
        pixel_values_videos: values(3 * 4, 12, 2.0),
        video_grid_thw: vec![[3, 2, 2]],
    }
}

#[test]
fn round_trip_images_and_videos() {
    let d = scratch("rt");
    let p = d.join("prep.safetensors");
    let b = sample();
    write_prep_safetensors(&p, &b).unwrap();
    assert_eq!(read_prep_safetensors(&p).unwrap(), b);
    // Only the file itself is left: the temporary was renamed.
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("prep.safetensors")]);

    // Images only and videos only.
    let imgs = PixelBatch {
        pixel_values_videos: vec![],
        video_grid_thw: vec![],
        ..sample()
    };
    write_prep_safetensors(&p, &imgs).unwrap();
    assert_eq!(read_prep_safetensors(&p).unwrap(), imgs);
    let vids = PixelBatch {
        pixel_values: vec![],
        image_grid_thw: vec![],
        ..sample()
    };
    write_prep_safetensors(&p, &vids).unwrap();
    assert_eq!(read_prep_safetensors(&p).unwrap(), vids);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn writer_refuses_inconsistent_batches_and_leaves_nothing() {
    let d = scratch("bad");
    let p = d.join("x.safetensors");
    let mut b = sample();
    b.image_grid_thw[0] = [1, 2, 4];
    let e = write_prep_safetensors(&p, &b).unwrap_err().to_string();
    assert!(
        e.contains("pixel_values has 12 rows") && e.contains("sums t*h*w to 16"),
        "{e}"
    );
    let missing_dir = d.join("no/such/dir/x.safetensors");
    assert!(write_prep_safetensors(&missing_dir, &sample()).is_err());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    assert!(write_prep_safetensors(&p, &PixelBatch::new(12)).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

fn write_raw(path: &std::path::Path, tensors: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn reader_accepts_videos_packed_into_pixel_values() {
    let d = scratch("packed");
    let p = d.join("packed.safetensors");
    // An image [1,2,2] then a video [2,2,2] packed as image rows: 4 + 8 rows.
    let vals = values(12, 6, 0.0);
    write_raw(
        &p,
        vec![
            ("pixel_values", Dtype::F32, vec![12, 6], f32_bytes(&vals)),
            (
                "image_grid_thw",
                Dtype::I64,
                vec![2, 3],
                i64_bytes(&[1, 2, 2, 2, 2, 2]),
            ),
        ],
    );
    let b = read_prep_safetensors(&p).unwrap();
    assert_eq!(b.patch_dim, 6);
    assert_eq!(b.image_grid_thw, vec![[1, 2, 2], [2, 2, 2]]);
    assert_eq!(b.pixel_values, vals);
    assert!(b.video_grid_thw.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reader_names_the_problem() {
    let d = scratch("errs");
    let p = d.join("e.safetensors");
    let check = |tensors: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)>, needle: &str| {
        write_raw(&p, tensors);
        let e = read_prep_safetensors(&p).unwrap_err().to_string();
        assert!(e.contains(needle), "`{e}` should mention `{needle}`");
    };
    // f32 rows x cols of pixels, and an i64 grid [len / 3, 3]
    let px = |name: &'static str, rows: usize, cols: usize| {
        let data = f32_bytes(&values(rows, cols, 0.0));
        (name, Dtype::F32, vec![rows, cols], data)
    };
    let grid = |name: &'static str, thw: &[i64]| {
        (name, Dtype::I64, vec![thw.len() / 3, 3], i64_bytes(thw))
    };
    check(
        vec![px("pixel_values", 5, 6), grid("image_grid_thw", &[1, 2, 2])],
        "`pixel_values` has 5 rows but `image_grid_thw` sums t*h*w to 4",
    );
    check(
        vec![px("pixel_values", 4, 6)],
        "`image_grid_thw` is missing",
    );
    check(
        vec![grid("video_grid_thw", &[2, 2, 2])],
        "`pixel_values_videos` is missing",
    );
    check(
        vec![
            px("pixel_values", 4, 6),
            grid("image_grid_thw", &[1, 2, 2]),
            px("pixel_values_videos", 8, 5),
            grid("video_grid_thw", &[2, 2, 2]),
        ],
        "rows have 6 values but `pixel_values_videos` rows have 5",
    );
    let (name, dt, _, data) = px("pixel_values", 4, 6);
    check(
        vec![
            (name, dt, vec![24], data),
            grid("image_grid_thw", &[1, 2, 2]),
        ],
        "expected [rows, patch_dim]",
    );
    check(
        vec![
            px("pixel_values", 4, 6),
            (
                "image_grid_thw",
                Dtype::F32,
                vec![1, 3],
                f32_bytes(&[1.0, 2.0, 2.0]),
            ),
        ],
        "expected I64",
    );
    check(
        vec![("other", Dtype::F32, vec![1, 1], f32_bytes(&[0.0]))],
        "holds neither",
    );
    std::fs::write(&p, b"not a safetensors file").unwrap();
    assert!(
        read_prep_safetensors(&p)
            .unwrap_err()
            .to_string()
            .contains("not a safetensors file")
    );
    std::fs::remove_dir_all(&d).unwrap();
}
