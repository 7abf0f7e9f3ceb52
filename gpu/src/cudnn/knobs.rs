//! What an engine configuration chose (the engine's global index and its knob settings), read
//! from a configuration the heuristics offered and rebuilt on another operation graph.
//!
//! The batch-invariant mode plans one segment of a length first and then runs a batch of such
//! segments with the *same* choice: cuDNN's flash kernels compute each (segment, head, query
//! tile) on its own, so with the same engine and knobs a segment's rows do not depend on how
//! many others share the call, while the heuristics asked about the batch could choose other
//! knobs (another tile, another reduction order).

use super::Desc;
use crate::error::GpuError;
use cudarc::cudnn::sys as dnn;
use dnn::cudnnBackendAttributeName_t as A;
use dnn::cudnnBackendAttributeType_t as T;
use dnn::cudnnBackendDescriptorType_t as D;

/// Knob choices read from a configuration at most.
const MAX_KNOBS: usize = 64;

/// An engine configuration's choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EngineChoice {
    /// The engine's global index.
    pub engine: i64,
    /// (knob type as cuDNN numbers it, value), in the configuration's order.
    pub knobs: Vec<(u32, i64)>,
}

impl EngineChoice {
    /// `engine 5 (knobs 17=1, 22=0)` for logs.
    pub fn describe(&self) -> String {
        let k: Vec<String> = self.knobs.iter().map(|(t, v)| format!("{t}={v}")).collect();
        format!("engine {} (knobs {})", self.engine, k.join(", "))
    }
}

/// The engine and knob settings of a (finalized) engine configuration.
pub(super) fn read(cfg: &Desc) -> Result<EngineChoice, GpuError> {
    let engine = cfg
        .get_descs(
            A::CUDNN_ATTR_ENGINECFG_ENGINE,
            D::CUDNN_BACKEND_ENGINE_DESCRIPTOR,
            1,
        )?
        .pop()
        .ok_or_else(|| GpuError::Cudnn {
            op: "cudnnBackendGetAttribute(ENGINECFG_ENGINE)".into(),
            message: "no engine in the configuration".into(),
        })?;
    let mut index: i64 = -1;
    // SAFETY: one i64.
    unsafe {
        engine.get(
            A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
            T::CUDNN_TYPE_INT64,
            &mut index,
        )?
    };
    let choices = cfg.get_descs(
        A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
        D::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
        MAX_KNOBS,
    )?;
    let mut knobs = Vec::new();
    for c in &choices {
        // read as the enum's underlying u32: cuDNN may name knobs this build does not
        let (mut ty, mut value) = (0u32, 0i64);
        // SAFETY: a knob type (a C enum, 4 bytes) and an i64.
        unsafe {
            c.get(
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                T::CUDNN_TYPE_KNOB_TYPE,
                &mut ty,
            )?;
            c.get(
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                T::CUDNN_TYPE_INT64,
                &mut value,
            )?;
        }
        knobs.push((ty, value));
    }
    Ok(EngineChoice {
        engine: index,
        knobs,
    })
}

/// A finalized engine configuration of `choice` on `graph` (the descriptors it references are
/// kept in the returned list).
pub(super) fn build(graph: &Desc, choice: &EngineChoice) -> Result<(Desc, Vec<Desc>), GpuError> {
    let engine = Desc::new(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    engine.set_desc(A::CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph)?;
    engine.set_i64s(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &[choice.engine])?;
    engine.finalize("engine")?;
    let mut knobs = Vec::with_capacity(choice.knobs.len());
    for &(ty, value) in &choice.knobs {
        let k = Desc::new(D::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)?;
        // SAFETY: a knob type (4 bytes, the value read from cuDNN) and an i64.
        unsafe {
            k.set_value(
                A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                T::CUDNN_TYPE_KNOB_TYPE,
                &ty,
            )?;
        }
        k.set_i64s(A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, &[value])?;
        k.finalize("knob choice")?;
        knobs.push(k);
    }
    let cfg = Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?;
    cfg.set_desc(A::CUDNN_ATTR_ENGINECFG_ENGINE, &engine)?;
    if !knobs.is_empty() {
        let raws: Vec<dnn::cudnnBackendDescriptor_t> = knobs.iter().map(|k| k.0).collect();
        // SAFETY: `raws.len()` finalized knob-choice descriptors.
        unsafe {
            cfg.set(
                A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raws.len() as i64,
                raws.as_ptr().cast(),
            )?;
        }
    }
    cfg.finalize("engine configuration")?;
    knobs.push(engine);
    Ok((cfg, knobs))
}
