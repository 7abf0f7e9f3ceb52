//! A Parquet dataset directory (the Spark convention: `NAME.parquet/part-00000.parquet`, ...),
//! one row per input, written shard by shard: each shard under a hidden temporary name
//! (`.part-00000.parquet.tmp`, which readers skip) and renamed when whole. A shard's footer
//! records each row's source (path, size, mtime), which is what a rerun reads to resume.
//! This side decides shards and row groups; [`super::writer`] encodes and writes them on
//! threads of their own.

use super::writer::{NewShard, Pipeline, ROW_GROUP_BYTES, default_encoders};
use anyhow::{Context, Result, bail};
use arrow_array::builder::{Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BinaryArray, RecordBatch};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema};
use ndarray::ArcArray2;
use parquet::arrow::arrow_writer::ArrowRowGroupWriterFactory;
use parquet::arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, TypePtr};
use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Key of the per-shard footer entry: a JSON array of `[input, size, mtime_ns]`, row by row.
const SOURCES_KEY: &str = "glm5v.sources";
/// Element type of the `embedding` column's bytes (`--out-dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    Bf16,
}

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

/// One output row.
pub struct Row {
    pub input: String,
    pub error: Option<String>,
    pub grid_thw: Option<[usize; 3]>,
    pub tokens: Option<usize>,
    pub shape: Option<[usize; 2]>,
    /// The rows (written as little-endian row-major bytes in the dataset's dtype; possibly a
    /// view of the batch they came in, not copied before the encoder writes them).
    pub embedding: Option<ArcArray2<f32>>,
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
    props: Arc<WriterProperties>,
    root: TypePtr,
    dtype: Dtype,
    shard_rows: usize,
    next_part: usize,
    shard: Option<Shard>,
    /// The row group being gathered (handed to the encoders at [`ROW_GROUP_BYTES`] or at the
    /// shard's end).
    group: Vec<Row>,
    group_bytes: usize,
    group_limit: usize,
    pipeline: Pipeline,
}

/// The shard being filled, as this side sees it.
struct Shard {
    factory: Arc<ArrowRowGroupWriterFactory>,
    dest: Arc<PathBuf>,
    rows: usize,
    groups: usize,
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
        dtype: Dtype,
    ) -> Result<(Self, HashSet<Stamp>)> {
        Self::open_with(
            dir,
            metadata,
            shard_rows,
            overwrite,
            dtype,
            default_encoders(),
        )
    }

    fn open_with(
        dir: &Path,
        metadata: &[(String, String)],
        shard_rows: usize,
        overwrite: bool,
        dtype: Dtype,
        encoders: usize,
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
        let schema = Arc::new(schema(metadata));
        let embedding = ColumnPath::from("embedding");
        let mut props = WriterProperties::builder()
            .set_column_dictionary_enabled(embedding.clone(), false)
            .set_column_statistics_enabled(embedding, EnabledStatistics::None)
            .set_created_by(format!("glm5v {}", env!("CARGO_PKG_VERSION")))
            .build();
        // as ArrowWriter does: readers get the Arrow schema (and its metadata) back
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let root = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)?
            .root_schema_ptr();
        let pipeline = Pipeline::start(schema.clone(), dtype, encoders)?;
        let ds = Self {
            dir: dir.to_path_buf(),
            schema,
            props: Arc::new(props),
            root,
            dtype,
            shard_rows,
            next_part,
            shard: None,
            group: Vec::new(),
            group_bytes: 0,
            group_limit: ROW_GROUP_BYTES,
            pipeline,
        };
        Ok((ds, done))
    }

    /// Takes one row; row groups and shards are handed to the writer as they fill. An error of
    /// the writer (a full disk, say) comes back here, at the next row.
    pub fn push(&mut self, row: Row) -> Result<()> {
        self.pipeline.check()?;
        if self.shard.is_none() {
            self.shard = Some(self.new_shard()?);
        }
        let shard = self.shard.as_mut().expect("opened above");
        shard.rows += 1;
        shard.sources.push(serde_json::json!([
            row.input,
            row.stamp.0,
            row.stamp.1.to_string()
        ]));
        let full = shard.rows == self.shard_rows;
        self.group_bytes += row.embedding.as_ref().map_or(0, |e| e.len()) * self.dtype.size();
        self.group.push(row);
        if self.group_bytes >= self.group_limit {
            self.hand_over_group()?;
        }
        if full {
            self.close_shard()?;
        }
        Ok(())
    }

    fn hand_over_group(&mut self) -> Result<()> {
        if self.group.is_empty() {
            return Ok(());
        }
        let shard = self.shard.as_mut().expect("a group belongs to a shard");
        let rows = std::mem::take(&mut self.group);
        self.group_bytes = 0;
        self.pipeline
            .group(&shard.factory, &shard.dest, shard.groups, rows)?;
        shard.groups += 1;
        Ok(())
    }

    fn new_shard(&mut self) -> Result<Shard> {
        let n = self.next_part;
        self.next_part += 1;
        let dest = self.dir.join(format!("part-{n:05}.parquet"));
        let temp = self.dir.join(format!(".part-{n:05}.parquet.tmp"));
        let file =
            File::create(&temp).with_context(|| format!("cannot write {}", temp.display()))?;
        let file = match SerializedFileWriter::new(file, self.root.clone(), self.props.clone()) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&temp);
                return Err(e).with_context(|| format!("cannot write {}", temp.display()));
            }
        };
        let factory = Arc::new(ArrowRowGroupWriterFactory::new(&file, self.schema.clone()));
        let shard_dest = Arc::new(dest.clone());
        self.pipeline.open(NewShard { file, temp, dest })?;
        Ok(Shard {
            factory,
            dest: shard_dest,
            rows: 0,
            groups: 0,
            sources: Vec::new(),
        })
    }

    fn close_shard(&mut self) -> Result<()> {
        self.hand_over_group()?;
        let Some(shard) = self.shard.take() else {
            return Ok(());
        };
        // the run's metadata also as plain footer entries (readers that skip ARROW:schema)
        let mut footer: Vec<KeyValue> = self
            .schema
            .metadata()
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        footer.push(KeyValue::new(
            SOURCES_KEY.to_string(),
            serde_json::Value::Array(shard.sources).to_string(),
        ));
        self.pipeline.close(footer)
    }

    /// Hands over what is gathered, closes the last shard and waits for the writer: the number
    /// of shards renamed into place.
    pub fn finish(mut self) -> Result<usize> {
        self.close_shard()?;
        self.pipeline.finish()
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

/// The rows as one record batch: the embeddings' one copy, into the column's bytes in `dtype`.
pub fn record_batch(schema: &Arc<Schema>, rows: &[Row], dtype: Dtype) -> Result<RecordBatch> {
    let mut input = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut grid = ListBuilder::new(Int32Builder::new());
    let mut tokens = Int32Builder::new();
    let mut shape = ListBuilder::new(Int32Builder::new());
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
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(input.finish()),
        Arc::new(status.finish()),
        Arc::new(error.finish()),
        Arc::new(grid.finish()),
        Arc::new(tokens.finish()),
        Arc::new(shape.finish()),
        Arc::new(embedding_column(rows, dtype)?),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The `embedding` column: each row's values little-endian in `dtype` (bf16: rounded to
/// nearest even, as `half::bf16::from_f32`), written once into one buffer of the exact size.
fn embedding_column(rows: &[Row], dtype: Dtype) -> Result<BinaryArray> {
    let size = dtype.size();
    let total: usize = rows
        .iter()
        .map(|r| r.embedding.as_ref().map_or(0, |e| e.len() * size))
        .sum();
    let mut values = vec![0u8; total];
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0i32);
    let mut at = 0usize;
    for r in rows {
        if let Some(e) = &r.embedding {
            let n = e.len() * size;
            let out = &mut values[at..at + n];
            let put = |v: &[f32], out: &mut [u8]| match dtype {
                Dtype::F32 => {
                    for (o, x) in out.chunks_exact_mut(4).zip(v) {
                        o.copy_from_slice(&x.to_le_bytes());
                    }
                }
                Dtype::Bf16 => {
                    for (o, x) in out.chunks_exact_mut(2).zip(v) {
                        o.copy_from_slice(&half::bf16::from_f32(*x).to_le_bytes());
                    }
                }
            };
            // a view of the rows as they are when already row-major (no copy)
            put(e.as_standard_layout().as_slice().expect("standard"), out);
            at += n;
        }
        offsets.push(i32::try_from(at).context("a row group's embeddings over 2 GiB")?);
    }
    let nulls = NullBuffer::from_iter(rows.iter().map(|r| r.embedding.is_some()));
    Ok(BinaryArray::try_new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from_vec(values),
        Some(nulls),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn row(i: usize, tokens: usize, hidden: usize) -> Row {
        let ok = i % 4 != 3;
        let e = Array2::from_shape_fn((tokens, hidden), |(r, c)| {
            ((i * 131 + r * 17 + c) as f32).sin() * 1e3 / (1.0 + c as f32)
        });
        Row {
            input: format!("in{i}"),
            error: (!ok).then(|| format!("in{i}: bad")),
            grid_thw: Some([1, 2, 2 * tokens]),
            tokens: Some(tokens),
            shape: Some([tokens, hidden]),
            embedding: ok.then(|| e.into_shared()),
            stamp: (i as u64, 7),
        }
    }

    /// (input, embedding bytes) of each row.
    type Rows = Vec<(String, Option<Vec<u8>>)>;

    /// Every row of the dataset, shards in order, and the row groups of each shard.
    fn read(dir: &Path) -> (Rows, Vec<usize>) {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert!(names.iter().all(|n| part_number(n).is_some()), "{names:?}");
        let (mut rows, mut groups) = (Vec::new(), Vec::new());
        for n in names {
            let b =
                ParquetRecordBatchReaderBuilder::try_new(File::open(dir.join(n)).unwrap()).unwrap();
            groups.push(b.metadata().num_row_groups());
            for batch in b.build().unwrap() {
                let batch = batch.unwrap();
                let input = batch
                    .column_by_name("input")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .unwrap()
                    .clone();
                let emb = batch
                    .column_by_name("embedding")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<BinaryArray>()
                    .unwrap()
                    .clone();
                for k in 0..batch.num_rows() {
                    use arrow_array::Array;
                    let e = (!emb.is_null(k)).then(|| emb.value(k).to_vec());
                    rows.push((input.value(k).to_string(), e));
                }
            }
        }
        (rows, groups)
    }

    #[test]
    fn rows_come_back_in_order_from_many_row_groups_and_encoders() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("x.parquet");
        let meta = [("glm5v.model".to_string(), "m".to_string())];
        let (mut ds, done) = Dataset::open_with(&dir, &meta, 5, false, Dtype::F32, 3).unwrap();
        assert!(done.is_empty());
        // a row group at every second row or so: groups finish out of order on 3 encoders
        ds.group_limit = 100;
        let rows: Vec<Row> = (0..13).map(|i| row(i, 1 + i % 5, 8)).collect();
        let want: Rows = rows
            .iter()
            .map(|r| {
                let e = r
                    .embedding
                    .as_ref()
                    .map(|e| e.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
                (r.input.clone(), e)
            })
            .collect();
        for r in rows {
            ds.push(r).unwrap();
        }
        assert_eq!(ds.finish().unwrap(), 3);
        let (got, groups) = read(&dir);
        assert_eq!(got, want);
        assert_eq!(groups.len(), 3);
        assert_eq!(groups, [2, 2, 1], "row groups a shard");
        // the footer names every row's source, as a rerun reads it
        let mut again = HashSet::new();
        read_sources(&dir.join("part-00002.parquet"), &mut again).unwrap();
        assert_eq!(again.len(), 3);
        assert!(again.contains(&("in12".to_string(), 12, 7)));
        let (_, done) = Dataset::open(&dir, &meta, 5, false, Dtype::F32).unwrap();
        assert_eq!(done.len(), 13);
    }

    #[test]
    fn bf16_rows_are_rounded_as_half_does_and_any_layout_is_written_row_major() {
        let specials = [
            0.0f32,
            -0.0,
            1.0 + f32::EPSILON,
            1.0 + 1.0 / 256.0, // halfway between two bf16: to even (down)
            1.0 + 3.0 / 256.0, // halfway: to even (up)
            f32::MAX,
            f32::MIN_POSITIVE / 3.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -3.4e38,
            1.2345678e-3,
        ];
        let a = Array2::from_shape_vec((3, 4), specials.to_vec()).unwrap();
        // a transposed view (not standard layout) and the plain array
        use ndarray::ShapeBuilder;
        let t = Array2::from_shape_fn((3, 4).f(), |i| a[i]).into_shared(); // column-major
        assert!(t.as_slice().is_none());
        let r = |e: ArcArray2<f32>| Row {
            input: "x".into(),
            error: None,
            grid_thw: None,
            tokens: Some(3),
            shape: Some([3, 4]),
            embedding: Some(e),
            stamp: (0, 0),
        };
        let rows = vec![r(a.clone().into_shared()), r(t)];
        let want: Vec<u8> = specials
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let col = embedding_column(&rows, Dtype::Bf16).unwrap();
        assert_eq!(col.value(0), &want[..]);
        assert_eq!(col.value(1), &want[..]);
        let f: Vec<u8> = specials.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(
            embedding_column(&rows, Dtype::F32).unwrap().value(1),
            &f[..]
        );
    }

    #[test]
    fn a_write_that_fails_is_an_error_naming_the_shard_and_renames_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("y.parquet");
        let (mut ds, _) = Dataset::open_with(&dir, &[], 10, false, Dtype::F32, 2).unwrap();
        for i in 0..3 {
            ds.push(row(i, 2, 8)).unwrap();
        }
        // the directory goes away under the run: the shard cannot be renamed into place
        std::fs::remove_dir_all(&dir).unwrap();
        let e = format!("{:#}", ds.finish().unwrap_err());
        assert!(e.contains("part-00000.parquet"), "{e}");
        assert!(!dir.exists());
    }
}
