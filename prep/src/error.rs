//! The one error type of the `prep` crate. Every message names the input and says what to do.

use std::path::PathBuf;

/// Everything that can go wrong between image bytes and `pixel_values`.
#[derive(Debug, thiserror::Error)]
pub enum PrepError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{input}: the file is empty")]
    Empty { input: String },
    #[error(
        "{input}: not a supported image (recognised: {}; the other formats PIL opens are named \
         as unsupported)",
        crate::decode::recognised_formats()
    )]
    UnknownFormat { input: String },
    #[error("{input}: corrupt or truncated {format} data: {detail}")]
    Corrupt {
        input: String,
        format: String,
        detail: String,
    },
    #[error("{input}: unsupported {format} variant: {detail}")]
    Unsupported {
        input: String,
        format: String,
        detail: String,
    },
    #[error("{input}: the image has zero width or height ({width}x{height})")]
    ZeroSize {
        input: String,
        width: u64,
        height: u64,
    },
    #[error(
        "{input}: {width}x{height} = {pixels} pixels exceeds the decode budget of {budget} pixels \
         (refused before decoding, as PIL's DecompressionBombError; raise the budget to accept it)"
    )]
    DecodeBudget {
        input: String,
        width: u64,
        height: u64,
        pixels: u64,
        budget: u64,
    },
    #[error("{input}: bad data URI: {detail}")]
    DataUri { input: String, detail: String },
    #[error("invalid preprocessing option: {0}")]
    InvalidOption(String),
    #[error("{path}: invalid preprocessor config: {detail}")]
    PreprocessorConfig { path: PathBuf, detail: String },
    #[error("invalid video input: {0}")]
    Video(String),
    #[error(
        "{input}: video files need glm5v built with --features video and FFmpeg's libraries \
         (Debian/Ubuntu: apt-get install pkg-config libavformat-dev libavcodec-dev libavfilter-dev \
         libswscale-dev libavutil-dev; then cargo build --release --features video); frames as \
         image files work without it (--video FRAME... --fps F)"
    )]
    VideoSupport { input: String },
    #[error(
        "{input}: FFmpeg cannot open it as a video (not a video, or corrupt or truncated): {detail}"
    )]
    NotAVideo { input: String, detail: String },
    #[error("{input}: the file has no video stream")]
    NoVideoStream { input: String },
    #[error("{input}: this FFmpeg has no decoder for the video codec `{codec}`")]
    VideoCodec { input: String, codec: String },
    #[error("{input}: corrupt or truncated video ({codec} in {container}): {detail}")]
    VideoCorrupt {
        input: String,
        codec: String,
        container: String,
        detail: String,
    },
    #[error(
        "{input}: {frames} sampled frames of {width}x{height} = {bytes} bytes of RGB exceeds the video \
         decode budget of {budget} bytes (refused before decoding; raise the budget to accept it)"
    )]
    VideoDecodeBudget {
        input: String,
        frames: usize,
        width: u64,
        height: u64,
        bytes: u64,
        budget: u64,
    },
    #[error("cannot write {path}: {detail}")]
    Write { path: PathBuf, detail: String },
}

/// Short alias used throughout the crate.
pub type Result<T, E = PrepError> = std::result::Result<T, E>;
