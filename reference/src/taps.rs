//! Taps (TAPS.md section 2): named intermediate values, row-major `[rows, cols]` f32.
//!
//! A forward hands every tap to a [`TapSink`]; with no sink (or one that does not
//! [`want`](TapSink::wants) a name) nothing is converted or copied.

use crate::geometry::Grid;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Receives taps and progress from a forward. `Send` so a forward can run inside a thread pool.
pub trait TapSink: Send {
    /// Whether the sink wants the tap `name`; a producer skips the work for unwanted names.
    fn wants(&self, _name: &str) -> bool {
        true
    }
    /// One tap: `data` is `[rows, cols]` row-major.
    fn tap(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]);
    /// After each step of a forward: `done` of `total` (patch embed + rope, each block, the head).
    fn progress(&mut self, _done: usize, _total: usize) {}
}

/// Every TAPS.md tap name of a tower of `depth` blocks, in forward order.
pub fn tap_names(depth: usize) -> Vec<String> {
    let mut names = vec![
        "patch_embed".to_string(),
        "rotary_pos_emb.cos".into(),
        "rotary_pos_emb.sin".into(),
    ];
    for i in 0..depth {
        for part in BLOCK_PARTS {
            names.push(if part.is_empty() {
                format!("blocks.{i}")
            } else {
                format!("blocks.{i}.{part}")
            });
        }
    }
    names.extend(HEAD_TAPS.iter().map(|s| s.to_string()));
    names
}

/// Every TAPS.md tap name of a tower with this config.
pub fn tap_names_for(cfg: &crate::VisionConfig) -> Vec<String> {
    tap_names(cfg.depth)
}

/// Sub-names of a block's taps, in forward order (`""` = the block output).
pub const BLOCK_PARTS: [&str; 9] = [
    "norm1",
    "attn.qkv",
    "attn.q_norm",
    "attn.k_norm",
    "attn.proj.input",
    "attn",
    "norm2",
    "mlp",
    "",
];

/// Taps after the blocks, in forward order.
pub const HEAD_TAPS: [&str; 9] = [
    "post_layernorm",
    "downsample",
    "merger.proj",
    "merger.post_projection_norm",
    "merger.act1",
    "merger.gate_proj",
    "merger.up_proj",
    "merger.down_proj",
    "merger",
];

/// Which taps to keep: all, or only some blocks' taps (the non-block taps are always kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapFilter {
    /// `None`: every block; `Some(set)`: only these blocks.
    pub blocks: Option<BTreeSet<usize>>,
}

impl TapFilter {
    pub fn all() -> Self {
        Self { blocks: None }
    }
    /// Keep only these blocks' taps (plus patch embed, rope and the head).
    pub fn blocks(blocks: impl IntoIterator<Item = usize>) -> Self {
        Self {
            blocks: Some(blocks.into_iter().collect()),
        }
    }
    /// Parses "all" or a comma list of block indices such as "0,1,12,23".
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim() == "all" {
            return Ok(Self::all());
        }
        let mut set = BTreeSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            set.insert(
                part.parse::<usize>()
                    .map_err(|_| format!("not a block index: {part:?}"))?,
            );
        }
        Ok(Self { blocks: Some(set) })
    }
    pub fn matches(&self, name: &str) -> bool {
        match (&self.blocks, block_of(name)) {
            (Some(set), Some(i)) => set.contains(&i),
            _ => true,
        }
    }
}

/// The block index of a `blocks.{i}...` tap name.
fn block_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blocks.")?;
    rest.split('.').next()?.parse().ok()
}

/// One stored tap.
#[derive(Debug, Clone, PartialEq)]
pub struct Tap {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// Keeps taps in memory, by name (the first value of a name wins).
#[derive(Debug, Clone, Default)]
pub struct TapMap {
    pub filter: TapFilter,
    pub taps: BTreeMap<String, Tap>,
}

impl TapMap {
    pub fn new(filter: TapFilter) -> Self {
        Self {
            filter,
            taps: BTreeMap::new(),
        }
    }
    pub fn get(&self, name: &str) -> Option<&Tap> {
        self.taps.get(name)
    }
}

impl TapSink for TapMap {
    fn wants(&self, name: &str) -> bool {
        self.filter.matches(name) && !self.taps.contains_key(name)
    }
    fn tap(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]) {
        if self.wants(name) {
            self.taps.insert(
                name.to_string(),
                Tap {
                    rows,
                    cols,
                    data: data.to_vec(),
                },
            );
        }
    }
}

/// Adds a progress callback to an optional sink (which still decides which taps are made).
pub struct WithProgress<'a, P: FnMut(usize, usize) + Send> {
    pub inner: Option<&'a mut dyn TapSink>,
    pub on_progress: P,
}

impl<P: FnMut(usize, usize) + Send> TapSink for WithProgress<'_, P> {
    fn wants(&self, name: &str) -> bool {
        self.inner.as_ref().is_some_and(|s| s.wants(name))
    }
    fn tap(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]) {
        if let Some(s) = self.inner.as_mut() {
            s.tap(name, rows, cols, data)
        }
    }
    fn progress(&mut self, done: usize, total: usize) {
        (self.on_progress)(done, total);
        if let Some(s) = self.inner.as_mut() {
            s.progress(done, total)
        }
    }
}

/// Writes a TAPS.md tap dump: F32 2-D taps, optionally the inputs (`pixel_values` F32,
/// `image_grid_thw` I64) and `__metadata__`. Tap data streams to a side file as it arrives
/// (memory stays flat); [`finish`](Self::finish) writes header + data to a temporary file and
/// renames it into place, so a reader never sees a half-written dump. Dropped unfinished, it
/// removes its temporary files.
pub struct DumpSink {
    path: PathBuf,
    data_path: PathBuf,
    data: Option<BufWriter<File>>,
    filter: TapFilter,
    entries: Vec<(String, &'static str, Vec<usize>, u64, u64)>,
    names: BTreeSet<String>,
    offset: u64,
    metadata: BTreeMap<String, String>,
    error: Option<std::io::Error>,
}

impl DumpSink {
    /// Starts a dump to `path` (nothing appears there before `finish`). Metadata starts with
    /// `producer` = "glm5v-reference" and `version` = this crate's version.
    pub fn create(path: &Path, filter: TapFilter) -> std::io::Result<Self> {
        let data_path = sibling(path, ".data.part");
        let file = File::create(&data_path)?;
        let mut metadata = BTreeMap::new();
        metadata.insert("producer".to_string(), "glm5v-reference".to_string());
        metadata.insert("version".to_string(), env!("CARGO_PKG_VERSION").to_string());
        Ok(Self {
            path: path.to_path_buf(),
            data_path,
            data: Some(BufWriter::with_capacity(1 << 20, file)),
            filter,
            entries: Vec::new(),
            names: BTreeSet::new(),
            offset: 0,
            metadata,
            error: None,
        })
    }

    /// Sets one `__metadata__` entry (e.g. `precision`, `checkpoint`).
    pub fn set_metadata(&mut self, key: &str, value: &str) {
        self.metadata.insert(key.to_string(), value.to_string());
    }

    /// Stores the inputs: `pixel_values` `[rows, cols]` F32 and `image_grid_thw` `[I, 3]` I64.
    pub fn inputs(&mut self, pixel_values: &[f32], rows: usize, cols: usize, grid_thw: &[Grid]) {
        self.write_entry(
            "pixel_values",
            "F32",
            vec![rows, cols],
            bytemuck::cast_slice(pixel_values),
        );
        let grid: Vec<i64> = grid_thw
            .iter()
            .flat_map(|g| g.iter().map(|&v| v as i64))
            .collect();
        self.write_entry(
            "image_grid_thw",
            "I64",
            vec![grid_thw.len(), 3],
            bytemuck::cast_slice(&grid),
        );
    }

    fn write_entry(&mut self, name: &str, dtype: &'static str, shape: Vec<usize>, bytes: &[u8]) {
        if self.error.is_some() || !self.names.insert(name.to_string()) {
            return;
        }
        let Some(w) = self.data.as_mut() else { return };
        // safetensors is little-endian; so is every target this crate builds for.
        if let Err(e) = w.write_all(bytes) {
            self.error = Some(e);
            return;
        }
        let start = self.offset;
        self.offset += bytes.len() as u64;
        self.entries
            .push((name.to_string(), dtype, shape, start, self.offset));
    }

    /// Names written so far, in arrival order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.0.as_str())
    }

    /// Writes the file: header, then the data, into `<path>.part`, renamed to `path`.
    pub fn finish(mut self) -> std::io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut data = self.data.take().expect("finish runs once");
        data.flush()?;
        drop(data);
        let mut header = serde_json::Map::new();
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(&self.metadata).expect("string map"),
        );
        for (name, dtype, shape, start, end) in &self.entries {
            header.insert(
                name.clone(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, end]}),
            );
        }
        let mut text = serde_json::to_vec(&serde_json::Value::Object(header)).expect("json");
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let part = sibling(&self.path, ".part");
        {
            let mut out = BufWriter::with_capacity(1 << 20, File::create(&part)?);
            out.write_all(&(text.len() as u64).to_le_bytes())?;
            out.write_all(&text)?;
            std::io::copy(&mut File::open(&self.data_path)?, &mut out)?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&part, &self.path)?;
        let _ = std::fs::remove_file(&self.data_path);
        Ok(())
    }
}

impl Drop for DumpSink {
    fn drop(&mut self) {
        if self.data.is_some() {
            self.data = None;
            let _ = std::fs::remove_file(&self.data_path);
        }
    }
}

impl TapSink for DumpSink {
    fn wants(&self, name: &str) -> bool {
        self.filter.matches(name) && !self.names.contains(name)
    }
    fn tap(&mut self, name: &str, rows: usize, cols: usize, data: &[f32]) {
        if self.filter.matches(name) {
            self.write_entry(name, "F32", vec![rows, cols], bytemuck::cast_slice(data));
        }
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_keeps_listed_blocks_and_the_head() {
        let f = TapFilter::parse("0, 1,12,23").unwrap();
        assert!(f.matches("blocks.12.attn.qkv"));
        assert!(f.matches("blocks.0"));
        assert!(!f.matches("blocks.2.mlp"));
        assert!(!f.matches("blocks.120"));
        assert!(
            f.matches("merger.gate_proj")
                && f.matches("patch_embed")
                && f.matches("rotary_pos_emb.cos")
        );
        assert!(TapFilter::parse("x").is_err());
        assert!(TapFilter::parse("all").unwrap().matches("blocks.7"));
    }

    #[test]
    fn tap_names_cover_taps_md() {
        let names = tap_names(2);
        assert_eq!(names.len(), 3 + 2 * 9 + 9);
        assert!(names.contains(&"blocks.1".to_string()));
        assert!(names.contains(&"blocks.0.attn.proj.input".to_string()));
    }

    #[test]
    fn dump_is_a_valid_safetensors_file() {
        let dir = std::env::temp_dir().join(format!("glm5v-dump-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("taps.safetensors");
        let mut sink = DumpSink::create(&path, TapFilter::blocks([1])).unwrap();
        sink.set_metadata("precision", "f32");
        sink.inputs(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3, &[[1, 2, 1]]);
        sink.tap("blocks.0.mlp", 1, 1, &[9.0]); // filtered out
        sink.tap("blocks.1.mlp", 1, 2, &[7.0, 8.0]);
        assert!(!sink.wants("blocks.1.mlp"));
        assert!(!path.exists(), "nothing at the final path before finish");
        sink.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let t = st.tensor("blocks.1.mlp").unwrap();
        assert_eq!(t.shape(), &[1, 2]);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, f32>(t.data()),
            vec![7.0, 8.0]
        );
        assert!(st.tensor("blocks.0.mlp").is_err());
        let g = st.tensor("image_grid_thw").unwrap();
        assert_eq!(g.dtype(), safetensors::Dtype::I64);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, i64>(g.data()),
            vec![1, 2, 1]
        );
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().clone().unwrap();
        assert_eq!(
            meta.get("producer").map(String::as_str),
            Some("glm5v-reference")
        );
        assert_eq!(meta.get("precision").map(String::as_str), Some("f32"));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "temporary files are gone"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
