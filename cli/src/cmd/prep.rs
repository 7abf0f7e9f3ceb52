//! `glm5v prep`: images (and videos) to `pixel_values` + grids, as upstream's processor.

use crate::inputs::{TokenArgs, prep_batch};
use crate::{CmdResult, out};
use glm5v_prep::write_prep_safetensors;
use std::path::PathBuf;

/// Preprocess images (and videos: files or frames) exactly as upstream's processor does.
///
/// Writes `pixel_values` [N, 1176] F32 + `image_grid_thw` [I, 3] I64 (and `pixel_values_videos` +
/// `video_grid_thw` for --video), the preprocessed-inputs layout, README "File formats". Several images are concatenated in
/// order, as upstream does for a list of images. Nothing is written unless every input succeeds.
#[derive(clap::Args)]
pub struct Args {
    /// Images: paths or data URIs.
    #[arg(value_name = "IMAGE")]
    images: Vec<String>,
    /// Output safetensors file.
    #[arg(long, value_name = "FILE.safetensors")]
    out: PathBuf,
    /// Video files (decoded, sampled at 2 fps and paired as upstream's video processor does with
    /// torchcodec; needs a build with --features video), one video each, after the images; or,
    /// with --fps, the frames (image files, in order; every frame is used, as upstream does for a
    /// frame list) of one video.
    #[arg(long, value_name = "FILE|FRAME", num_args = 1..)]
    video: Vec<String>,
    /// Frame rate of the --video frames (sets the timestamps; makes --video a frame list).
    #[arg(long, value_name = "F")]
    fps: Option<f64>,
    /// Transparency: drop (default, as load_image) or white (composite over white).
    #[arg(long, default_value = "drop", value_parser = ["drop", "white"])]
    alpha: String,
    #[command(flatten)]
    tokens: TokenArgs,
    /// A model directory whose preprocessor configs override the defaults.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    out::check_dir(&args.out)?;
    let opts = args
        .tokens
        .prep_options(args.model.as_deref(), &args.alpha)?;
    let batch = prep_batch(&args.images, &args.video, args.fps, &opts)?;
    write_prep_safetensors(&args.out, &batch)?;
    let grids: Vec<String> = batch
        .image_grid_thw
        .iter()
        .chain(&batch.video_grid_thw)
        .map(|g| format!("{}x{}x{}", g[0], g[1], g[2]))
        .collect();
    eprintln!(
        "glm5v: {} image(s), {} video(s), {} rows of {} (grids {}) -> {}",
        batch.image_grid_thw.len(),
        batch.video_grid_thw.len(),
        batch.image_rows() + batch.video_rows(),
        batch.patch_dim,
        grids.join(", "),
        args.out.display()
    );
    Ok(())
}
