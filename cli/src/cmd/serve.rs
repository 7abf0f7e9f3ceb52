//! `glm5v serve`: the tower as an HTTP service (glm5v-serve; docs/SERVING.md).

use crate::CmdResult;
use crate::backend::BackendArgs;
use anyhow::{Context, bail};
use glm5v_serve::api::WireDtype;
use glm5v_serve::{ServeOptions, Server};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Serve embeddings over HTTP: dynamic batching, admission by header token price, the hand-off
/// to vLLM's encoder cache.
///
/// Routes: POST /v1/embeddings, POST /v1/plan, GET /health, /ready, /metrics, /info
/// (docs/SERVING.md has the fields and curl examples). Listens on 127.0.0.1 unless --addr says
/// otherwise. SIGTERM or SIGINT drains: /ready turns 503, new requests are refused, every
/// admitted request is answered, then the process exits 0.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    backend: BackendArgs,
    /// Address to listen on (loopback by default; 0.0.0.0:PORT to serve other hosts).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    addr: SocketAddr,
    /// Most merged tokens in one forward; one input over it is refused with 413.
    /// Default: 4096 on the CPU, 16384 on the GPU.
    #[arg(long, value_name = "N")]
    max_batch_tokens: Option<usize>,
    /// Embedding requests admitted at once; the next gets 429 at once, with Retry-After.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_concurrent_requests: usize,
    /// Most merged tokens per image: larger images are resized down to it, as upstream's
    /// processor does (default 8000, or the model's preprocessor_config.json).
    #[arg(long, value_name = "N")]
    max_image_tokens: Option<usize>,
    /// Fewest merged tokens per image (default 16, or the model's preprocessor_config.json).
    #[arg(long, value_name = "N")]
    min_image_tokens: Option<usize>,
    /// Largest request body in bytes; larger get 413.
    #[arg(long, default_value_t = 32 << 20, value_name = "BYTES")]
    payload_limit: usize,
    /// Seconds an admitted request may wait for its answer; then 504 and its inputs are dropped.
    #[arg(long, default_value_t = 60.0, value_name = "S")]
    request_timeout: f64,
    /// Seconds the drain after SIGTERM may take before the server stops anyway.
    #[arg(long, default_value_t = 30.0, value_name = "S")]
    drain_timeout: f64,
    /// Also write each input's embeddings as DIR/KEY/encoder_cache.safetensors (tensor
    /// `ec_cache`), the layout of vLLM's ECExampleConnector; KEY = the request's uuid, else
    /// the sha256 of the image bytes.
    #[arg(long, value_name = "DIR")]
    ec_cache_dir: Option<PathBuf>,
    /// Element type of the EC cache files.
    #[arg(long, default_value = "bf16", value_parser = ["bf16", "f16", "f32"])]
    ec_cache_dtype: String,
    /// Require `Authorization: Bearer KEY` on every route but /health and /ready.
    #[arg(
        long,
        env = "GLM5V_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
    /// Threads decoding images, apart from the tower's (default 2; with --backend gpu the
    /// cores less one, 2 to 16).
    #[arg(long, value_name = "N")]
    decode_threads: Option<usize>,
    /// The `model` name answers carry (default: the model directory's name).
    #[arg(long, value_name = "NAME")]
    served_model_name: Option<String>,
    /// Log each request (info) and more (-vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

pub fn run(args: Args) -> CmdResult {
    Ok(serve(args)?)
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{flag} must be a positive number of seconds, not {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

fn serve(args: Args) -> anyhow::Result<()> {
    let level = match args.verbose {
        0 => tracing::Level::WARN,
        1 => tracing::Level::INFO,
        _ => tracing::Level::DEBUG,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
    let b = &args.backend;
    let mut embedders = b.load_workers()?;
    let mut prep = embedders[0].prep_options().clone();
    if let Some(n) = args.max_image_tokens {
        prep.image.max_tokens = n;
    }
    if let Some(n) = args.min_image_tokens {
        prep.image.min_tokens = n;
    }
    prep.validate()
        .context("--min-image-tokens/--max-image-tokens")?;
    for e in &mut embedders {
        e.set_prep_options(prep.clone());
    }
    let describe = match embedders.len() {
        1 => embedders[0].tower().describe(),
        k => format!("{} x{k}", embedders[0].tower().describe()),
    };
    let cfg = embedders[0].config().clone();
    let gpus: Vec<usize> = if b.backend == "gpu" {
        b.devices()?
    } else {
        Vec::new()
    };
    let model_name = args.served_model_name.clone().unwrap_or_else(|| {
        b.model
            .canonicalize()
            .unwrap_or_else(|_| b.model.clone())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "glm5v".into())
    });
    let mut o = ServeOptions::new(model_name);
    o.addr = args.addr;
    o.max_batch_tokens =
        args.max_batch_tokens
            .unwrap_or(if b.backend == "gpu" { 16384 } else { 4096 });
    o.max_concurrent_requests = args.max_concurrent_requests;
    o.payload_limit = args.payload_limit;
    o.request_timeout = seconds("--request-timeout", args.request_timeout)?;
    o.drain_timeout = seconds("--drain-timeout", args.drain_timeout)?;
    o.ec_cache_dir = args.ec_cache_dir.clone();
    o.ec_cache_dtype = WireDtype::parse(&args.ec_cache_dtype).expect("clap checked it");
    o.api_key = args.api_key.clone().filter(|k| !k.is_empty());
    o.decode_threads = args
        .decode_threads
        .unwrap_or_else(|| crate::backend::default_decode_threads(&b.backend));
    o.info = serde_json::json!({
        "backend": b.backend,
        "precision": b.precision(),
        "tower": describe,
        "gpus": gpus,
        "model_dir": b.model.display().to_string(),
        "vision_config": serde_json::to_value(&cfg).unwrap_or_default(),
    });
    let workers: Vec<Arc<_>> = embedders.into_iter().map(Arc::new).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("glm5v-http")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let server = Server::start(workers, o).await?;
        eprintln!(
            "glm5v: serving {} ({describe}) on http://{} (POST /v1/embeddings; GET /ready turns 200 after the warm-up forward)",
            b.model.display(),
            server.addr
        );
        server.run_until_signal().await?;
        eprintln!("glm5v: drained, every admitted request answered");
        Ok::<_, anyhow::Error>(())
    })
}
