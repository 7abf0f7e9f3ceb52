//! A Parquet dataset directory (the Spark convention: `NAME.parquet/part-00000.parquet`, ...),
//! one row per input, written shard by shard: each shard under a hidden temporary name
//! (`.part-00000.parquet.tmp`, which readers skip) and renamed when whole. A shard's footer
//! records each row's source (path, size, mtime), which is what a rerun reads to resume.

use anyhow::{Context, Result, bail};
use arrow_array::builder::{BinaryBuilder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::ColumnPath;
use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Key of the per-shard footer entry: a JSON array of `[input, size, mtime_ns]`, row by row.
const SOURCES_KEY: &str = "glm5v.sources";
/// Rows buffered before they go to the writer as one record batch.
const BATCH_ROWS: usize = 16;
/// Bytes of rows the writer holds before it closes a row group (bounds memory).
const ROW_GROUP_BYTES: usize = 64 << 20;

/// One output row.
pub struct Row {
    pub input: String,
    pub error: Option<String>,
    pub grid_thw: Option<[usize; 3]>,
    pub tokens: Option<usize>,
    pub shape: Option<[usize; 2]>,
    /// Little-endian row-major bytes in the dataset's dtype.
    pub embedding: Option<Vec<u8>>,
    /// What identifies the input's version: file size and mtime (ns); for a data URI its
    /// length and 0.
    pub stamp: (u64, i128),
}

/// The identity of an input for resuming: as given, with size and mtime.
pub type Stamp = (String, u64, i128);

/// Size and mtime of a path input (data URIs: length and 0; unreadable: 0 and 0).
pub fn stamp_of(input: &str) -> (u64, i128) {
    if input.starts_with("data:") {
        return (input.len() as u64, 0);
    }
    match std::fs::metadata(input) {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos() as i128)
                .unwrap_or(0);
            (m.len(), mtime)
        }
        Err(_) => (0, 0),
    }
}

/// The columns, exactly (README "Embedding a corpus"; other tools read them by name).
pub fn schema(metadata: &[(String, String)]) -> Schema {
    let list = |name| {
        Field::new(
            name,
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            true,
        )
    };
    Schema::new(vec![
        Field::new("input", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
        list("grid_thw"),
        Field::new("tokens", DataType::Int32, true),
        list("shape"),
        Field::new("embedding", DataType::Binary, true),
    ])
    .with_metadata(
        metadata
            .iter()
            .cloned()
            .collect::<std::collections::HashMap<String, String>>(),
    )
}

pub struct Dataset {
    dir: PathBuf,
    schema: Arc<Schema>,
    shard_rows: usize,
    next_part: usize,
    writer: Option<Shard>,
    pending: Vec<Row>,
    pub shards_written: usize,
}

struct Shard {
    writer: ArrowWriter<File>,
    temp: PathBuf,
    dest: PathBuf,
    rows: usize,
    sources: Vec<serde_json::Value>,
}

impl Dataset {
    /// Opens `dir` for writing: a new dataset, or (without `overwrite`) an existing one to
    /// resume, whose written inputs are returned.
    pub fn open(
        dir: &Path,
        metadata: &[(String, String)],
        shard_rows: usize,
        overwrite: bool,
    ) -> Result<(Self, HashSet<Stamp>)> {
        if shard_rows == 0 {
            bail!("--shard-rows must be at least 1");
        }
        let mut done = HashSet::new();
        let mut next_part = 0;
        if dir.exists() {
            if !dir.is_dir() {
                bail!(
                    "--out {}: exists and is not a dataset directory",
                    dir.display()
                );
            }
            for e in
                std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?
            {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                if name.starts_with(".part-") && name.ends_with(".tmp") {
                    // a shard an interrupted run never finished
                    std::fs::remove_file(&path)
                        .with_context(|| format!("cannot remove {}", path.display()))?;
                } else if let Some(n) = part_number(&name) {
                    if overwrite {
                        std::fs::remove_file(&path)
                            .with_context(|| format!("cannot remove {}", path.display()))?;
                    } else {
                        next_part = next_part.max(n + 1);
                        read_sources(&path, &mut done)?;
                    }
                }
            }
        } else {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let ds = Self {
            dir: dir.to_path_buf(),
            schema: Arc::new(schema(metadata)),
            shard_rows,
            next_part,
            writer: None,
            pending: Vec::new(),
            shards_written: 0,
        };
        Ok((ds, done))
    }

    pub fn push(&mut self, row: Row) -> Result<()> {
        self.pending.push(row);
        let bytes: usize = self
            .pending
            .iter()
            .map(|r| r.embedding.as_ref().map_or(0, Vec::len))
            .sum();
        if self.pending.len() >= BATCH_ROWS || bytes >= ROW_GROUP_BYTES / 4 {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Writes the buffered rows, opening and closing shards at `shard_rows`.
    fn write_pending(&mut self) -> Result<()> {
        let mut rows = std::mem::take(&mut self.pending);
        while !rows.is_empty() {
            if self.writer.is_none() {
                self.writer = Some(self.new_shard()?);
            }
            let shard = self.writer.as_mut().expect("opened above");
            let room = self.shard_rows - shard.rows;
            let rest = rows.split_off(rows.len().min(room));
            let batch = record_batch(&self.schema, &rows)?;
            shard.writer.write(&batch)?;
            if shard.writer.in_progress_size() >= ROW_GROUP_BYTES {
                shard.writer.flush()?;
            }
            shard.rows += rows.len();
            shard.sources.extend(
                rows.iter()
                    .map(|r| serde_json::json!([r.input, r.stamp.0, r.stamp.1.to_string()])),
            );
            if shard.rows == self.shard_rows {
                self.close_shard()?;
            }
            rows = rest;
        }
        Ok(())
    }

    fn new_shard(&mut self) -> Result<Shard> {
        let n = self.next_part;
        self.next_part += 1;
        let dest = self.dir.join(format!("part-{n:05}.parquet"));
        let temp = self.dir.join(format!(".part-{n:05}.parquet.tmp"));
        let file =
            File::create(&temp).with_context(|| format!("cannot write {}", temp.display()))?;
        let embedding = ColumnPath::from("embedding");
        let props = WriterProperties::builder()
            .set_column_dictionary_enabled(embedding.clone(), false)
            .set_column_statistics_enabled(embedding, EnabledStatistics::None)
            .set_created_by(format!("glm5v {}", env!("CARGO_PKG_VERSION")))
            .build();
        let writer = ArrowWriter::try_new(file, self.schema.clone(), Some(props))?;
        Ok(Shard {
            writer,
            temp,
            dest,
            rows: 0,
            sources: Vec::new(),
        })
    }

    fn close_shard(&mut self) -> Result<()> {
        let Some(mut shard) = self.writer.take() else {
            return Ok(());
        };
        // the run's metadata also as plain footer entries (readers that skip ARROW:schema)
        for (k, v) in self.schema.metadata() {
            shard
                .writer
                .append_key_value_metadata(KeyValue::new(k.clone(), v.clone()));
        }
        shard.writer.append_key_value_metadata(KeyValue::new(
            SOURCES_KEY.to_string(),
            serde_json::Value::Array(shard.sources).to_string(),
        ));
        let file = shard.writer.into_inner()?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&shard.temp, &shard.dest)
            .with_context(|| format!("cannot write {}", shard.dest.display()))?;
        self.shards_written += 1;
        Ok(())
    }

    /// Writes what is buffered and closes the last shard.
    pub fn finish(mut self) -> Result<usize> {
        self.write_pending()?;
        self.close_shard()?;
        Ok(self.shards_written)
    }
}

fn part_number(name: &str) -> Option<usize> {
    name.strip_prefix("part-")?
        .strip_suffix(".parquet")?
        .parse()
        .ok()
}

/// The inputs a finished shard holds, from its footer.
fn read_sources(path: &Path, done: &mut HashSet<Stamp>) -> Result<()> {
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let reader = SerializedFileReader::new(file).with_context(|| {
        format!(
            "{}: not a Parquet file (remove it, or --overwrite)",
            path.display()
        )
    })?;
    let kv = reader.metadata().file_metadata().key_value_metadata();
    let text = kv
        .and_then(|kv| kv.iter().find(|k| k.key == SOURCES_KEY))
        .and_then(|k| k.value.clone())
        .with_context(|| {
            format!(
                "{}: not written by glm5v embed (no {SOURCES_KEY}); --overwrite starts afresh",
                path.display()
            )
        })?;
    let rows: Vec<(String, u64, String)> = serde_json::from_str(&text)
        .with_context(|| format!("{}: unreadable {SOURCES_KEY}", path.display()))?;
    for (input, size, mtime) in rows {
        done.insert((input, size, mtime.parse().unwrap_or(0)));
    }
    Ok(())
}

fn record_batch(schema: &Arc<Schema>, rows: &[Row]) -> Result<RecordBatch> {
    let mut input = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut grid = ListBuilder::new(Int32Builder::new());
    let mut tokens = Int32Builder::new();
    let mut shape = ListBuilder::new(Int32Builder::new());
    let mut embedding = BinaryBuilder::new();
    let int = |v: usize| i32::try_from(v).context("a count over 2^31");
    for r in rows {
        input.append_value(&r.input);
        status.append_value(if r.error.is_none() { "ok" } else { "error" });
        error.append_option(r.error.as_deref());
        match r.grid_thw {
            Some(g) => {
                for v in g {
                    grid.values().append_value(int(v)?);
                }
                grid.append(true);
            }
            None => grid.append(false),
        }
        tokens.append_option(r.tokens.map(int).transpose()?);
        match r.shape {
            Some(s) => {
                for v in s {
                    shape.values().append_value(int(v)?);
                }
                shape.append(true);
            }
            None => shape.append(false),
        }
        embedding.append_option(r.embedding.as_deref());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(input.finish()),
        Arc::new(status.finish()),
        Arc::new(error.finish()),
        Arc::new(grid.finish()),
        Arc::new(tokens.finish()),
        Arc::new(shape.finish()),
        Arc::new(embedding.finish()),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}
