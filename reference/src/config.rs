//! The vision configuration, mirroring upstream's `Glm5NextVisionConfig`
//! (`transformers/models/glm5_next/configuration_glm5_next.py`, transformers 5.23.0).
//!
//! `config.json` may be the full model config (`"model_type": "glm5_next"`, vision fields nested
//! under `"vision_config"`) or a bare vision config. Every field falls back to upstream's default
//! when absent; held-out checkpoints change eps, swiglu_limit, rope theta, widths and depth, so
//! every value is read from the file.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Errors in a `config.json`. Each message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid config.json: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: invalid vision config: {reason}")]
    Invalid { path: String, reason: String },
}

/// `rope_parameters` of the vision config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "default_rope_type")]
    pub rope_type: String,
}

fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_rope_type() -> String {
    "axial".to_string()
}

impl Default for RopeParameters {
    fn default() -> Self {
        Self {
            rope_theta: default_rope_theta(),
            rope_type: default_rope_type(),
        }
    }
}

/// Mirrors `Glm5NextVisionConfig`. Field defaults are upstream's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub hidden_act: String,
    pub attention_bias: bool,
    pub num_heads: usize,
    pub in_channels: usize,
    pub patch_size: usize,
    pub rms_norm_eps: f64,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub out_hidden_size: usize,
    pub intermediate_size: usize,
    pub projection_intermediate_size: usize,
    pub swiglu_limit: f64,
    pub rope_parameters: RopeParameters,
}

impl Default for VisionConfig {
    fn default() -> Self {
        Self {
            depth: 24,
            hidden_size: 1024,
            hidden_act: "silu".into(),
            attention_bias: true,
            num_heads: 16,
            in_channels: 3,
            patch_size: 14,
            rms_norm_eps: 1e-5,
            spatial_merge_size: 2,
            temporal_patch_size: 2,
            out_hidden_size: 1536,
            intermediate_size: 4096,
            projection_intermediate_size: 10240,
            swiglu_limit: 10.0,
            rope_parameters: RopeParameters::default(),
        }
    }
}

/// Upstream aliases (`attribute_map`): `num_attention_heads` -> `num_heads`, `num_hidden_layers` -> `depth`.
fn apply_aliases(v: &mut serde_json::Value) {
    if let Some(obj) = v.as_object_mut() {
        for (alias, name) in [
            ("num_attention_heads", "num_heads"),
            ("num_hidden_layers", "depth"),
        ] {
            if !obj.contains_key(name)
                && let Some(x) = obj.remove(alias)
            {
                obj.insert(name.to_string(), x);
            }
        }
    }
}

impl VisionConfig {
    /// The GLM-5.3-Flash geometry (a real checkpoint sets `out_hidden_size` 4096).
    pub fn glm53_flash() -> Self {
        Self {
            out_hidden_size: 4096,
            ..Self::default()
        }
    }

    /// Parses a full (`vision_config` nested) or bare vision config from JSON text.
    /// `origin` names the source in error messages.
    pub fn from_json_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let root: serde_json::Value =
            serde_json::from_str(text).map_err(|source| ConfigError::Json {
                path: origin.to_string(),
                source,
            })?;
        let mut vision = match root.get("vision_config") {
            Some(v) if v.is_object() => v.clone(),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    path: origin.to_string(),
                    reason: "`vision_config` is not an object".into(),
                });
            }
            None => root,
        };
        apply_aliases(&mut vision);
        let cfg: VisionConfig =
            serde_json::from_value(vision).map_err(|source| ConfigError::Json {
                path: origin.to_string(),
                source,
            })?;
        cfg.validate().map_err(|reason| ConfigError::Invalid {
            path: origin.to_string(),
            reason,
        })?;
        Ok(cfg)
    }

    /// Reads `config.json` from a file path (or from `DIR/config.json` when given a directory).
    pub fn from_path(path: &Path) -> Result<Self, ConfigError> {
        let file = if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        };
        let origin = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Io {
            path: origin.clone(),
            source,
        })?;
        Self::from_json_str(&text, &origin)
    }

    /// Checks the invariants the tower relies on; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let nz = [
            ("depth", self.depth),
            ("hidden_size", self.hidden_size),
            ("num_heads", self.num_heads),
            ("in_channels", self.in_channels),
            ("patch_size", self.patch_size),
            ("spatial_merge_size", self.spatial_merge_size),
            ("temporal_patch_size", self.temporal_patch_size),
            ("out_hidden_size", self.out_hidden_size),
            ("intermediate_size", self.intermediate_size),
            (
                "projection_intermediate_size",
                self.projection_intermediate_size,
            ),
        ];
        for (name, v) in nz {
            if v == 0 {
                return Err(format!("`{name}` must be positive, found 0"));
            }
        }
        // Caps far above any real tower, so that the products the tower forms (patch_dim,
        // 3 * hidden, the merger's widths, ...) cannot overflow and a hostile depth cannot
        // drive allocations.
        const MAX_WIDTH: usize = 1 << 20;
        const MAX_DEPTH: usize = 4096;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "depth {} exceeds the limit of {MAX_DEPTH}",
                self.depth
            ));
        }
        for (name, v) in nz {
            if v > MAX_WIDTH {
                return Err(format!("`{name}` = {v} exceeds the limit of {MAX_WIDTH}"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_heads) {
            return Err(format!(
                "hidden_size ({}) is not divisible by num_heads ({})",
                self.hidden_size, self.num_heads
            ));
        }
        if !self.head_dim().is_multiple_of(4) {
            return Err(format!(
                "head_dim = hidden_size / num_heads = {} must be a multiple of 4 for the axial rope",
                self.head_dim()
            ));
        }
        if self.rope_parameters.rope_type != "axial" {
            return Err(format!(
                "rope_parameters.rope_type must be \"axial\", found {:?}",
                self.rope_parameters.rope_type
            ));
        }
        if self.hidden_act != "silu" {
            return Err(format!(
                "hidden_act must be \"silu\", found {:?}",
                self.hidden_act
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(format!(
                "rms_norm_eps must be finite and >= 0, found {}",
                self.rms_norm_eps
            ));
        }
        if self.swiglu_limit.is_nan() || self.swiglu_limit <= 0.0 {
            return Err(format!(
                "swiglu_limit must be > 0, found {}",
                self.swiglu_limit
            ));
        }
        if !(self.rope_parameters.rope_theta.is_finite() && self.rope_parameters.rope_theta > 0.0) {
            return Err(format!(
                "rope_parameters.rope_theta must be finite and > 0, found {}",
                self.rope_parameters.rope_theta
            ));
        }
        Ok(())
    }

    /// hidden_size / num_heads.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Values in one patch row: in_channels * temporal_patch_size * patch_size^2 (1176 by default).
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Patches per merged token (spatial_merge_size^2).
    pub fn merge_unit(&self) -> usize {
        self.spatial_merge_size * self.spatial_merge_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_bare_parse_to_the_same_config() {
        let bare = r#"{"depth": 2, "hidden_size": 64, "num_heads": 4, "rms_norm_eps": 1e-3,
                       "rope_parameters": {"rope_theta": 500.0, "rope_type": "axial"}}"#;
        let nested = format!(r#"{{"model_type": "glm5_next", "vision_config": {bare}}}"#);
        let a = VisionConfig::from_json_str(bare, "bare").unwrap();
        let b = VisionConfig::from_json_str(&nested, "nested").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.depth, 2);
        assert_eq!(a.head_dim(), 16);
        assert_eq!(a.rms_norm_eps, 1e-3);
        assert_eq!(a.rope_parameters.rope_theta, 500.0);
        // absent fields take upstream defaults
        assert_eq!(a.swiglu_limit, 10.0);
        assert_eq!(a.out_hidden_size, 1536);
        assert_eq!(a.patch_dim(), 1176);
    }

    #[test]
    fn aliases_are_honoured() {
        let c = VisionConfig::from_json_str(
            r#"{"num_hidden_layers": 3, "num_attention_heads": 8}"#,
            "x",
        )
        .unwrap();
        assert_eq!((c.depth, c.num_heads), (3, 8));
    }

    #[test]
    fn invalid_configs_name_the_problem() {
        let cases = [
            (r#"{"hidden_size": 100, "num_heads": 3}"#, "not divisible"),
            (r#"{"depth": 0}"#, "`depth` must be positive"),
            (
                r#"{"rope_parameters": {"rope_theta": 1e4, "rope_type": "default"}}"#,
                "axial",
            ),
            (r#"{"hidden_size": 72, "num_heads": 4}"#, "multiple of 4"),
        ];
        for (text, needle) in cases {
            let err = VisionConfig::from_json_str(text, "cfg.json")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{err:?} should contain {needle:?}");
            assert!(err.contains("cfg.json"), "{err:?} should name the file");
        }
    }
}
