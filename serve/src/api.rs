//! The wire format: request bodies, answers, and how embeddings are encoded (`float`, `base64`,
//! `npy`, in `f32`, `bf16` or `f16`). Names are a contract other tools are written against.

use crate::error::ApiError;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use glm5v_prep::ImageSource;
use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

/// `POST /v1/embeddings` and `POST /v1/plan`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequest {
    pub input: Inputs,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    #[serde(default)]
    pub dtype: Option<WireDtype>,
    #[serde(default)]
    pub uuid: Option<Vec<String>>,
}

/// One image or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Inputs {
    One(String),
    Many(Vec<String>),
}

impl Inputs {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Inputs::One(s) => vec![s],
            Inputs::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    #[default]
    Float,
    Base64,
    Npy,
}

/// The element type of `base64` and `npy` answers and of the EC cache files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WireDtype {
    #[default]
    F32,
    Bf16,
    F16,
}

impl WireDtype {
    pub fn name(self) -> &'static str {
        match self {
            WireDtype::F32 => "f32",
            WireDtype::Bf16 => "bf16",
            WireDtype::F16 => "f16",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [WireDtype::F32, WireDtype::Bf16, WireDtype::F16]
            .into_iter()
            .find(|d| d.name() == s)
    }

    /// Little-endian bytes of `values` in this type (bf16 and f16 rounded to nearest even).
    pub fn le_bytes(self, values: &[f32]) -> Vec<u8> {
        match self {
            WireDtype::F32 if cfg!(target_endian = "little") => {
                bytemuck::cast_slice::<f32, u8>(values).to_vec()
            }
            WireDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            WireDtype::Bf16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
            WireDtype::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        }
    }

    pub fn safetensors(self) -> safetensors::Dtype {
        match self {
            WireDtype::F32 => safetensors::Dtype::F32,
            WireDtype::Bf16 => safetensors::Dtype::BF16,
            WireDtype::F16 => safetensors::Dtype::F16,
        }
    }
}

/// An input string as image bytes: a `data:` URI (`data:[type][;base64],DATA`) or plain
/// base64 of an image file.
pub fn input_bytes(index: usize, s: &str) -> Result<Vec<u8>, ApiError> {
    let payload = if let Some(rest) = s.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',').ok_or_else(|| {
            ApiError::bad_input(index, "a data: URI without the ',' before its data")
        })?;
        if !meta.split(';').any(|p| p == "base64") {
            return Err(ApiError::bad_input(
                index,
                "a data: URI must carry base64 data (data:image/...;base64,...)",
            ));
        }
        data
    } else {
        s
    };
    // base64 with whitespace (line-wrapped encoders) accepted
    let cleaned: String;
    let payload = if payload.bytes().any(|b| b.is_ascii_whitespace()) {
        cleaned = payload.split_ascii_whitespace().collect();
        &cleaned
    } else {
        payload
    };
    STANDARD
        .decode(payload)
        .map_err(|e| ApiError::bad_input(index, &format!("not base64 image data: {e}")))
}

/// The source the batcher decodes, named for messages.
pub fn source(index: usize, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: format!("input {index}"),
        bytes,
    }
}

#[derive(Debug, Serialize)]
pub struct EmbeddingsResponse {
    pub object: &'static str,
    pub model: String,
    pub data: Vec<EmbeddingItem>,
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct EmbeddingItem {
    pub object: &'static str,
    pub index: usize,
    pub embedding: Embedding,
    pub shape: [usize; 2],
    pub grid_thw: [usize; 3],
    pub key: String,
}

/// `embedding`: rows of floats (written as f32, the shortest text that reads back to the same
/// bits), or bytes (`base64`: the values', `npy`: a `.npy` file's) written as a base64 string.
#[derive(Debug)]
pub enum Embedding {
    Float(Vec<Vec<f32>>),
    Bytes(Vec<u8>),
}

impl Serialize for Embedding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Embedding::Float(rows) => rows.serialize(s),
            Embedding::Bytes(b) => s.serialize_str(&base64_simd::STANDARD.encode_to_string(b)),
        }
    }
}

impl EmbeddingsResponse {
    /// The answer as JSON, the same bytes as `serde_json::to_vec`, with each base64 embedding
    /// encoded straight into the body: one allocation of the body and no escape scan of the
    /// text (base64 needs none). A 448x448 image's f32 answer (5.6 MB) took 10-12 ms through
    /// serde_json and the scalar base64 encoder on one core.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        let b64 = &base64_simd::STANDARD;
        let size: usize = self
            .data
            .iter()
            .map(|d| {
                256 + d.key.len()
                    + match &d.embedding {
                        Embedding::Bytes(b) => b64.encoded_length(b.len()),
                        Embedding::Float(rows) => rows.iter().map(|r| 16 * r.len() + 2).sum(),
                    }
            })
            .sum();
        let mut out = Vec::with_capacity(256 + self.model.len() + size);
        out.extend_from_slice(b"{\"object\":");
        serde_json::to_writer(&mut out, self.object)?;
        out.extend_from_slice(b",\"model\":");
        serde_json::to_writer(&mut out, &self.model)?;
        out.extend_from_slice(b",\"data\":[");
        for (i, d) in self.data.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"object\":");
            serde_json::to_writer(&mut out, d.object)?;
            out.extend_from_slice(b",\"index\":");
            serde_json::to_writer(&mut out, &d.index)?;
            out.extend_from_slice(b",\"embedding\":");
            match &d.embedding {
                Embedding::Float(rows) => serde_json::to_writer(&mut out, rows)?,
                Embedding::Bytes(b) => {
                    out.push(b'"');
                    let start = out.len();
                    out.resize(start + b64.encoded_length(b.len()), 0);
                    let n = b64
                        .encode(b, base64_simd::Out::from_slice(&mut out[start..]))
                        .len();
                    debug_assert_eq!(start + n, out.len());
                    out.push(b'"');
                }
            }
            out.extend_from_slice(b",\"shape\":");
            serde_json::to_writer(&mut out, &d.shape)?;
            out.extend_from_slice(b",\"grid_thw\":");
            serde_json::to_writer(&mut out, &d.grid_thw)?;
            out.extend_from_slice(b",\"key\":");
            serde_json::to_writer(&mut out, &d.key)?;
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"usage\":");
        serde_json::to_writer(&mut out, &self.usage)?;
        out.push(b'}');
        Ok(out)
    }
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Serialize)]
pub struct PlanResponse {
    pub object: &'static str,
    pub model: String,
    pub data: Vec<PlanItem>,
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct PlanItem {
    pub object: &'static str,
    pub index: usize,
    pub width: usize,
    pub height: usize,
    pub grid_thw: [usize; 3],
    pub tokens: usize,
    pub shape: [usize; 2],
}

/// `embedding` of one input in the asked format.
pub fn encode(
    rows: ArrayView2<f32>,
    format: EncodingFormat,
    dtype: WireDtype,
) -> Result<Embedding, ApiError> {
    let rows = rows.as_standard_layout();
    let values = rows.as_slice().expect("standard layout");
    let cols = rows.ncols().max(1);
    Ok(match format {
        EncodingFormat::Float => {
            Embedding::Float(values.chunks(cols).map(<[f32]>::to_vec).collect())
        }
        EncodingFormat::Base64 => Embedding::Bytes(dtype.le_bytes(values)),
        EncodingFormat::Npy => {
            let descr = match dtype {
                WireDtype::F32 => "<f4",
                WireDtype::F16 => "<f2",
                WireDtype::Bf16 => {
                    return Err(ApiError::unprocessable(
                        "encoding_format npy has no bfloat16 (numpy has no such type): ask for dtype f32 or f16, or encoding_format base64 with bf16",
                    ));
                }
            };
            let mut npy = npy_header(descr, rows.nrows(), rows.ncols());
            npy.extend_from_slice(&dtype.le_bytes(values));
            Embedding::Bytes(npy)
        }
    })
}

/// A `.npy` version 1.0 header for a C-order 2-D array, padded to a multiple of 64 bytes.
fn npy_header(descr: &str, rows: usize, cols: usize) -> Vec<u8> {
    let dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // magic (6) + version (2) + header length (2) + dict + padding + '\n'
    let unpadded = 10 + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    let header_len = dict.len() + pad + 1;
    let mut out = Vec::with_capacity(10 + header_len);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_answer_is_serde_jsons_and_its_base64_reads_back() {
        let v: Vec<f32> = (0..3 * 5).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
        let rows = ArrayView2::from_shape((3, 5), &v).unwrap();
        let mut data = Vec::new();
        for (i, (format, dtype)) in [
            (EncodingFormat::Float, WireDtype::F32),
            (EncodingFormat::Base64, WireDtype::F32),
            (EncodingFormat::Base64, WireDtype::Bf16),
            (EncodingFormat::Npy, WireDtype::F16),
        ]
        .into_iter()
        .enumerate()
        {
            data.push(EmbeddingItem {
                object: "embedding",
                index: i,
                embedding: encode(rows, format, dtype).unwrap(),
                shape: [3, 5],
                grid_thw: [1, 6, 10],
                key: format!("photo \"{i}\"\\\n"),
            });
        }
        let resp = EmbeddingsResponse {
            object: "list",
            model: "GLM \"5\"".into(),
            data,
            usage: Usage {
                prompt_tokens: 12,
                total_tokens: 12,
            },
        };
        let ours = resp.to_json().unwrap();
        assert_eq!(
            String::from_utf8(ours.clone()).unwrap(),
            String::from_utf8(serde_json::to_vec(&resp).unwrap()).unwrap()
        );
        // the f32 base64 is the values' little-endian bytes (read back by another decoder)
        let j: serde_json::Value = serde_json::from_slice(&ours).unwrap();
        let text = j["data"][1]["embedding"].as_str().unwrap();
        let bytes = STANDARD.decode(text).unwrap();
        let back: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, v);
        assert_eq!(j["data"][3]["key"], "photo \"3\"\\\n");
    }

    #[test]
    fn npy_header_is_aligned_and_parsable() {
        let h = npy_header("<f4", 20, 96);
        assert_eq!(h.len() % 64, 0);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        let len = u16::from_le_bytes([h[8], h[9]]) as usize;
        assert_eq!(10 + len, h.len());
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.contains("'shape': (20, 96)") && text.ends_with('\n'));
    }

    #[test]
    fn inputs_decode_from_data_uris_and_plain_base64() {
        let png = b"\x89PNG\r\n\x1a\n";
        let b64 = STANDARD.encode(png);
        assert_eq!(input_bytes(0, &b64).unwrap(), png);
        assert_eq!(
            input_bytes(0, &format!("data:image/png;base64,{b64}")).unwrap(),
            png
        );
        let wrapped = format!("{}\n{}", &b64[..4], &b64[4..]);
        assert_eq!(input_bytes(0, &wrapped).unwrap(), png);
        let e = input_bytes(3, "data:image/png,abc").unwrap_err();
        assert!(e.message.contains("input 3"), "{}", e.message);
        let e = input_bytes(1, "not base64!").unwrap_err();
        assert!(e.message.contains("input 1") && e.message.contains("base64"));
    }

    #[test]
    fn dtypes_round_to_nearest_even() {
        let v = [1.0f32, -2.5, 1.0 + 1.0 / 256.0];
        assert_eq!(WireDtype::F32.le_bytes(&v).len(), 12);
        let bf = WireDtype::Bf16.le_bytes(&v);
        assert_eq!(&bf[..2], &half::bf16::from_f32(1.0).to_le_bytes());
        // 1 + 2^-8 is halfway between two bf16 values: ties to even gives 1.0
        assert_eq!(&bf[4..6], &half::bf16::from_f32(1.0).to_le_bytes());
        assert_eq!(WireDtype::F16.le_bytes(&v).len(), 6);
    }
}
