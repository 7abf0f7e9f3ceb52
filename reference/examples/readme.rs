//! The Rust snippet of the README ("From Rust"), kept here so that it compiles with the
//! workspace and runs under `cargo xtask docs-check`. Run from the repository root:
//! `cargo run --release -p glm5v-reference --example readme`.

use glm5v_prep::ImageSource;
use glm5v_reference::{EmbedOptions, Embedder};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A model directory: config.json + model.safetensors (or an index with shards).
    let embedder = Embedder::load("fixtures/tower/tiny".as_ref(), EmbedOptions::default())?;

    // Decoded and preprocessed exactly as upstream's processor does, then one packed forward.
    let image = ImageSource::from_arg("fixtures/tower/inputs/scene_112x140.png");
    let out = embedder.embed_images(&[image])?;

    // [tokens, out_hidden_size]: one row per <|image|> placeholder of each item's prompt.
    println!("embeddings {:?}", out.embeddings.dim());
    for item in &out.items {
        let rows = item.token_offset..item.token_offset + item.token_count;
        println!("grid {:?} -> rows {rows:?}", item.grid);
    }
    Ok(())
}
