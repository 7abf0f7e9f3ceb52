//! The service on loopback with the tiny fixture checkpoint: every route, every error status,
//! answers bit-identical to embedding the same file alone, concurrency, overload, a client that
//! leaves, the EC cache files, the drain. Each test starts its own server on 127.0.0.1:0 and
//! bounds its load in count and time.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use glm5v_prep::ImageSource;
use glm5v_reference::{EmbedOptions, Embedder, Precision, Threads};
use glm5v_serve::{ServeOptions, Server};
use ndarray::Array2;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn embedder() -> Arc<Embedder> {
    static E: OnceLock<Arc<Embedder>> = OnceLock::new();
    E.get_or_init(|| {
        let o = EmbedOptions {
            precision: Precision::F32,
            threads: Threads::Count(1),
        };
        Arc::new(Embedder::load(&root().join("fixtures/tower/tiny"), o).unwrap())
    })
    .clone()
}

const IMAGES: [&str; 5] = [
    "fixtures/tower/inputs/scene_112x140.png",
    "fixtures/prep/images/jpeg_exif_6.jpg",
    "fixtures/prep/images/webp_lossy.webp",
    "fixtures/prep/images/tiny_1x1.png",
    "fixtures/tower/inputs/long_252x224.png",
];

fn file(p: &str) -> Vec<u8> {
    std::fs::read(root().join(p)).unwrap()
}

fn b64(p: &str) -> String {
    STANDARD.encode(file(p))
}

fn alone(p: &str) -> Array2<f32> {
    embedder()
        .embed_images(&[ImageSource::Path(root().join(p))])
        .unwrap()
        .embeddings
}

async fn start(edit: impl FnOnce(&mut ServeOptions)) -> (Server, String) {
    let mut o = ServeOptions::new("tiny");
    o.addr = "127.0.0.1:0".parse().unwrap();
    o.request_timeout = Duration::from_secs(30);
    edit(&mut o);
    let server = Server::start(vec![embedder()], o).await.unwrap();
    let base = format!("http://{}", server.addr);
    let client = reqwest::Client::new();
    for _ in 0..300 {
        let r = client.get(format!("{base}/ready")).send().await.unwrap();
        if r.status() == 200 {
            return (server, base);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the server never became ready");
}

async fn post(base: &str, route: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{route}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let v = r.json().await.unwrap_or(Value::Null);
    (status, headers, v)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect()
}

fn bits(a: &[f32]) -> Vec<u32> {
    a.iter().map(|v| v.to_bits()).collect()
}

fn error_message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_and_embeddings_match_embed_alone() {
    let (server, base) = start(|_| {}).await;
    let inputs: Vec<String> = IMAGES
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if i == 1 {
                format!("data:image/jpeg;base64,{}", b64(p))
            } else {
                b64(p)
            }
        })
        .collect();
    let (status, headers, v) = post(&base, "/v1/embeddings", &json!({"input": inputs})).await;
    assert_eq!(status, 200, "{v}");
    for h in [
        "x-total-time",
        "x-queue-time",
        "x-decode-time",
        "x-inference-time",
    ] {
        assert!(headers.contains_key(h), "missing {h}");
    }
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "tiny");
    let mut total = 0;
    for (i, p) in IMAGES.iter().enumerate() {
        let d = &v["data"][i];
        let want = alone(p);
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["shape"], json!([want.nrows(), want.ncols()]));
        assert_eq!(
            bits(&floats(&d["embedding"])),
            bits(want.as_slice().unwrap()),
            "{p}: float answer differs from embedding the file alone"
        );
        let plan = glm5v_prep::plan_image(
            &ImageSource::Path(root().join(p)),
            embedder().prep_options(),
        )
        .unwrap();
        assert_eq!(d["grid_thw"], json!(plan.grid_thw));
        let key = d["key"].as_str().unwrap();
        assert_eq!(key, glm5v_serve::ec_cache::content_key(&file(p)));
        total += want.nrows();
    }
    assert_eq!(v["usage"]["prompt_tokens"], total);
    assert_eq!(v["usage"]["total_tokens"], total);

    // base64 in each dtype, and npy
    let p = IMAGES[0];
    let want = alone(p);
    let want = want.as_slice().unwrap();
    for (dtype, bytes) in [
        (
            "f32",
            want.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        (
            "bf16",
            want.iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        (
            "f16",
            want.iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
    ] {
        let body = json!({"input": b64(p), "encoding_format": "base64", "dtype": dtype});
        let (status, _, v) = post(&base, "/v1/embeddings", &body).await;
        assert_eq!(status, 200, "{v}");
        let got = STANDARD
            .decode(v["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(got, bytes, "base64 {dtype}");
    }
    let body = json!({"input": [b64(p)], "encoding_format": "npy"});
    let (status, _, v) = post(&base, "/v1/embeddings", &body).await;
    assert_eq!(status, 200);
    let npy = STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    let header = std::str::from_utf8(&npy[10..10 + hlen]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(
        header.contains(&format!("'shape': ({}, 96)", want.len() / 96)),
        "{header}"
    );
    let data: Vec<f32> = npy[10 + hlen..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(bits(&data), bits(want));

    // plan: header only
    let (status, _, v) = post(
        &base,
        "/v1/plan",
        &json!({"input": [b64(IMAGES[4]), b64(IMAGES[3])]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let big = alone(IMAGES[4]);
    assert_eq!(v["data"][0]["tokens"], big.nrows());
    assert_eq!(v["data"][0]["shape"], json!([big.nrows(), 96]));
    assert_eq!(v["data"][0]["width"], 224);
    assert_eq!(v["data"][0]["height"], 252);

    let client = reqwest::Client::new();
    let get = |route: &str| client.get(format!("{base}{route}")).send();
    let r = get("/health").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-total-time"));
    let info: Value = get("/info").await.unwrap().json().await.unwrap();
    assert_eq!(info["limits"]["max_batch_tokens"], 4096);
    assert_eq!(info["limits"]["max_concurrent_requests"], 64);
    assert!(info["key"].as_str().unwrap().contains("sha256"));
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    for m in [
        "glm5v_requests_total{route=\"embeddings\",outcome=\"ok\"} 5",
        "glm5v_requests_total{route=\"plan\",outcome=\"ok\"} 1",
        "glm5v_queue_size 0",
        "glm5v_batch_tokens_bucket",
        "glm5v_forward_duration_seconds_count",
        "glm5v_batch_gather_duration_seconds_count",
        "glm5v_decode_duration_seconds_count 9",
        "glm5v_dropped_inputs_total 0",
    ] {
        assert!(text.contains(m), "metrics lack {m:?}:\n{text}");
    }
    let r = get("/v2/nothing").await.unwrap();
    assert_eq!(r.status(), 404);
    server.drain();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_has_its_status_and_the_server_goes_on() {
    let (server, base) = start(|o| {
        o.payload_limit = 200_000;
        o.max_batch_tokens = 50;
    })
    .await;
    let good = b64(IMAGES[0]);
    // 400: the second input's data is cut after its header; its index and the decoder's error named
    let png = file(IMAGES[0]);
    let cut = STANDARD.encode(&png[..png.len() / 2]);
    let (s, h, v) = post(&base, "/v1/embeddings", &json!({"input": [good, cut]})).await;
    assert_eq!(s, 400, "{v}");
    assert!(h.contains_key("x-total-time"));
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(v["error"]["type"], "invalid_input");
    let m = error_message(&v);
    assert!(m.starts_with("input 1: ") && m.contains("PNG"), "{m}");
    // 400: not an image at all, and not base64
    let junk = STANDARD.encode(b"hello, not an image");
    let (s, _, v) = post(&base, "/v1/embeddings", &json!({"input": [junk]})).await;
    assert_eq!(s, 400);
    assert!(error_message(&v).starts_with("input 0: "), "{v}");
    let (s, _, v) = post(&base, "/v1/embeddings", &json!({"input": ["%%%"]})).await;
    assert_eq!(s, 400);
    assert!(error_message(&v).contains("base64"), "{v}");
    // 413: one input over --max-batch-tokens (both numbers in the message)
    let (s, _, v) = post(
        &base,
        "/v1/embeddings",
        &json!({"input": [good, b64(IMAGES[4])]}),
    )
    .await;
    assert_eq!(s, 413, "{v}");
    let m = error_message(&v);
    let tokens = alone(IMAGES[4]).nrows();
    assert!(tokens > 50);
    assert!(
        m.contains("input 1") && m.contains(&format!("{tokens} tokens")) && m.contains("50"),
        "{m}"
    );
    // 413: body over --payload-limit
    let big = STANDARD.encode(vec![0u8; 300_000]);
    let (s, _, v) = post(&base, "/v1/embeddings", &json!({"input": big})).await;
    assert_eq!(s, 413, "{v}");
    assert!(error_message(&v).contains("200000"), "{v}");
    // 422: malformed bodies
    for body in [
        json!({"inputs": [good]}),
        json!({"input": 3}),
        json!({"input": [good], "encoding_format": "hex"}),
        json!({"input": [good], "dtype": "f64"}),
        json!({"input": []}),
        json!({"input": [good], "uuid": ["a", "b"]}),
        json!({"input": [good], "uuid": ["../x"]}),
        json!({"input": [good], "encoding_format": "npy", "dtype": "bf16"}),
    ] {
        let (s, _, v) = post(&base, "/v1/embeddings", &body).await;
        assert_eq!(s, 422, "{body}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request");
    }
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    // and a good request still gets its embeddings
    let (s, _, v) = post(&base, "/v1/embeddings", &json!({"input": good})).await;
    assert_eq!(s, 200);
    assert_eq!(
        bits(&floats(&v["data"][0]["embedding"])),
        bits(alone(IMAGES[0]).as_slice().unwrap())
    );
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    server.drain();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_every_route_but_health_and_ready() {
    let (server, base) = start(|o| o.api_key = Some("s3cret".into())).await;
    // a fresh connection per request: a 401 is answered before the request's body is read, so
    // the server closes that connection, and a pooled client could send the next request on it
    // before it sees the close (seen once in CI: IncompleteMessage on the GET after the POSTs)
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let body = json!({"input": b64(IMAGES[0])});
    let r = c
        .post(format!("{base}/v1/embeddings"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "unauthorized");
    let r = c
        .post(format!("{base}/v1/embeddings"))
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    for route in ["/metrics", "/info"] {
        assert_eq!(
            c.get(format!("{base}{route}"))
                .send()
                .await
                .unwrap()
                .status(),
            401
        );
    }
    for route in ["/health", "/ready"] {
        assert_eq!(
            c.get(format!("{base}{route}"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let r = c
        .post(format!("{base}/v1/embeddings"))
        .bearer_auth("s3cret")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = c
        .get(format!("{base}/metrics"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!text.contains("s3cret"));
    assert!(text.contains("outcome=\"unauthorized\"} 2"), "{text}");
    server.drain();
    server.wait().await.unwrap();
}

/// Many clients at once: every answer right; over --max-concurrent-requests is 429 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_right_answers_or_429() {
    let (server, base) = start(|o| o.max_concurrent_requests = 6).await;
    let want: Vec<Vec<u32>> = IMAGES
        .iter()
        .map(|p| bits(alone(p).as_slice().unwrap()))
        .collect();
    let want = Arc::new(want);
    let mut tasks = Vec::new();
    for client in 0..24usize {
        let (base, want) = (base.clone(), want.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = (0, 0);
            for k in 0..3usize {
                let picks: Vec<usize> = (0..4)
                    .map(|j| (client * 7 + k * 3 + j) % IMAGES.len())
                    .collect();
                let input: Vec<String> = picks.iter().map(|&i| b64(IMAGES[i])).collect();
                let body = json!({"input": input, "encoding_format": "base64"});
                let r = reqwest::Client::new()
                    .post(format!("{base}/v1/embeddings"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                if r.status() == 429 {
                    assert_eq!(r.headers()["retry-after"], "1");
                    seen.1 += 1;
                    continue;
                }
                assert_eq!(r.status(), 200);
                let v: Value = r.json().await.unwrap();
                for (n, &i) in picks.iter().enumerate() {
                    let bytes = STANDARD
                        .decode(v["data"][n]["embedding"].as_str().unwrap())
                        .unwrap();
                    let got: Vec<u32> = bytes
                        .chunks(4)
                        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                        .collect();
                    assert_eq!(got, want[i], "client {client}, request {k}, input {n}");
                }
                seen.0 += 1;
            }
            seen
        }));
    }
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        let (a, b) = t.await.unwrap();
        ok += a;
        refused += b;
    }
    assert_eq!(ok + refused, 72);
    assert!(ok >= 6, "{ok} answered");
    assert!(
        refused >= 1,
        "24 clients never went over 6 concurrent requests"
    );
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(&format!("outcome=\"overloaded\"}} {refused}")),
        "{text}"
    );
    server.drain();
    server.wait().await.unwrap();
}

/// A client that leaves while its request waits: the request is counted dropped and its inputs
/// are dropped before decode or forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_is_dropped() {
    let (server, base) = start(|o| o.decode_threads = 1).await;
    // a long request ahead keeps the one decoder busy
    let busy: Vec<String> = (0..120).map(|i| b64(IMAGES[i % 3])).collect();
    let b2 = base.clone();
    let ahead =
        tokio::spawn(async move { post(&b2, "/v1/embeddings", &json!({"input": busy})).await.0 });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let leaving: Vec<String> = (0..20).map(|_| b64(IMAGES[4])).collect();
    let r = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap()
        .post(format!("{base}/v1/embeddings"))
        .json(&json!({"input": leaving}))
        .send()
        .await;
    assert!(
        r.is_err(),
        "the request should have timed out on the client"
    );
    assert_eq!(ahead.await.unwrap(), 200);
    let mut text = String::new();
    for _ in 0..100 {
        text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("glm5v_queue_size 0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(text.contains("outcome=\"dropped\"} 1"), "{text}");
    let dropped: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("glm5v_dropped_inputs_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        dropped >= 1,
        "no input of the gone request was dropped:\n{text}"
    );
    // 120 + 20 inputs: the forwards ran only what was not dropped
    let inputs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("glm5v_inputs_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(inputs, 120);
    server.drain();
    server.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_cache_files_hold_each_inputs_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let (server, base) = start(move |o| o.ec_cache_dir = Some(d)).await;
    let body = json!({"input": [b64(IMAGES[0]), b64(IMAGES[2])], "uuid": ["req-1.a", "req-1.b"]});
    let (s, _, v) = post(&base, "/v1/embeddings", &body).await;
    assert_eq!(s, 200, "{v}");
    let (s, _, v2) = post(&base, "/v1/embeddings", &json!({"input": b64(IMAGES[3])})).await;
    assert_eq!(s, 200);
    let hashed = glm5v_serve::ec_cache::content_key(&file(IMAGES[3]));
    assert_eq!(v2["data"][0]["key"], hashed);
    for (key, p) in [
        ("req-1.a", IMAGES[0]),
        ("req-1.b", IMAGES[2]),
        (hashed.as_str(), IMAGES[3]),
    ] {
        let path = dir.path().join(key).join("encoder_cache.safetensors");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.names(), vec!["ec_cache"]);
        let t = st.tensor("ec_cache").unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::BF16);
        let want = alone(p);
        assert_eq!(t.shape(), &[want.nrows(), 96]);
        let expect: Vec<u8> = want
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        assert_eq!(t.data(), &expect[..], "{key}");
        let names: Vec<_> = std::fs::read_dir(dir.path().join(key))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names,
            vec!["encoder_cache.safetensors"],
            "a temporary file was left"
        );
    }
    assert_eq!(v["data"][1]["key"], "req-1.b");
    server.drain();
    server.wait().await.unwrap();
}

/// Drain: every admitted request answered, new ones refused with 503, /ready 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_answers_every_admitted_request() {
    let (server, base) = start(|_| {}).await;
    let mut tasks = Vec::new();
    for i in 0..8usize {
        let base = base.clone();
        let input: Vec<String> = (0..40)
            .map(|j| b64(IMAGES[(i + j) % IMAGES.len()]))
            .collect();
        tasks.push(tokio::spawn(async move {
            post(&base, "/v1/embeddings", &json!({"input": input}))
                .await
                .0
        }));
    }
    // wait until all 8 are admitted, then drain
    for _ in 0..500 {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("glm5v_in_flight_requests 8") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.drain();
    let c = reqwest::Client::new();
    let late = c
        .post(format!("{base}/v1/embeddings"))
        .json(&json!({"input": b64(IMAGES[0])}))
        .send()
        .await;
    if let Ok(r) = late {
        assert_eq!(r.status(), 503);
    }
    if let Ok(r) = c.get(format!("{base}/ready")).send().await {
        assert_eq!(r.status(), 503);
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("the server stops once drained")
        .unwrap();
}
