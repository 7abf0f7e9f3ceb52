//! `glm5v plan`: grid and token count per image (and video file), from the header alone.

use crate::CmdResult;
use crate::inputs::TokenArgs;
use anyhow::anyhow;
use glm5v_prep::{ImageSource, plan_image, plan_video};
use std::path::PathBuf;

/// Print one JSON line per image: size, canvas, grid and merged-token count, without decoding pixels.
///
/// Images whose header promises more pixels than PIL's limit (2 x 89,478,485) are refused here,
/// before any decoding. A --video file gets one line too: its metadata as torchcodec reports it,
/// the sampled frame indices and timestamps, canvas, grid and tokens (packets are read, no frame
/// is decoded; needs a build with --features video).
#[derive(clap::Args)]
pub struct Args {
    /// Images: paths or data URIs.
    #[arg(value_name = "IMAGE", required_unless_present = "video")]
    images: Vec<String>,
    /// Video files, planned after the images.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    video: Vec<PathBuf>,
    #[command(flatten)]
    tokens: TokenArgs,
    /// A model directory whose preprocessor_config.json overrides the defaults.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    let opts = args.tokens.prep_options(args.model.as_deref(), "drop")?;
    // every plan first, so a bad input prints nothing but its error
    let plans = args
        .images
        .iter()
        .map(|a| plan_image(&ImageSource::from_arg(a), &opts))
        .collect::<Result<Vec<_>, _>>()?;
    let videos = args
        .video
        .iter()
        .map(|v| plan_video(v, &opts))
        .collect::<Result<Vec<_>, _>>()?;
    if plans.is_empty() && videos.is_empty() {
        return Err(anyhow!("no input: give IMAGE paths or --video FILE...").into());
    }
    for p in plans {
        println!("{}", serde_json::to_string(&p)?);
    }
    for v in videos {
        println!("{}", serde_json::to_string(&v)?);
    }
    Ok(())
}
