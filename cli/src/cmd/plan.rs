//! `glm5v plan`: grid and token count per image, from the header alone.

use crate::CmdResult;
use crate::inputs::TokenArgs;
use glm5v_prep::{ImageSource, plan_image};
use std::path::PathBuf;

/// Print one JSON line per image: size, canvas, grid and merged-token count, without decoding pixels.
///
/// Images whose header promises more pixels than PIL's limit (2 x 89,478,485) are refused here,
/// before any decoding.
#[derive(clap::Args)]
pub struct Args {
    /// Images: paths or data URIs.
    #[arg(value_name = "IMAGE", required = true)]
    images: Vec<String>,
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
    for p in plans {
        println!("{}", serde_json::to_string(&p)?);
    }
    Ok(())
}
