//! The GLM-5.3-Flash vision tower on CUDA (docs/GPU.md).
//!
//! - [`device_available`]: finds a CUDA device, or a typed [`GpuError::NoDevice`] (never a panic:
//!   cudarc is loaded dynamically, and the libraries are probed first).
//! - [`GpuTower`]: loads a checkpoint once (weights resident in bf16, or f32 for the parity mode)
//!   and implements the reference crate's [`glm5v_reference::Tower`] trait: the same stages and
//!   the same taps, copied to the host only when a sink wants them.
//!
//! Kernels are `.cu` files in `kernels/`, compiled at run time by NVRTC for the device's
//! architecture and cached per process; GEMMs go through cuBLASLt with one algorithm per weight
//! (the batch-invariant default, [`lt`]) or cuBLAS (`GLM5V_GPU_BATCH_INVARIANT=0`): bf16 in, f32
//! accumulate; f32 with no TF32 in the parity mode. Repeated layouts replay a CUDA graph of the
//! whole forward (same bits, no launch cost: [`GraphLimits`]).
pub mod cudnn;
pub mod device;
mod env;
pub mod error;
mod half_bounds;
pub mod lt;
pub mod tower;

pub use device::{
    DeviceInfo, compile_kernels, device_available, device_info, kernel_source, nvrtc_available,
};
pub use error::GpuError;
pub use tower::{GpuOptions, GpuTower, GraphLimits, GraphStats, Precision};
