//! The crate's error type: every failure is typed, none aborts the process.

use glm5v_reference::{InputError, TowerError, WeightError};

/// What the GPU backend can fail with.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable CUDA driver or device (library missing, no GPU, driver refuses).
    #[error("no CUDA device/driver found: {reason}")]
    NoDevice { reason: String },
    /// A CUDA library other than the driver is missing (NVRTC, cuBLAS).
    #[error(
        "CUDA library {library} not found (needed by the GPU backend); is it on LD_LIBRARY_PATH?"
    )]
    MissingLibrary { library: &'static str },
    /// The device could not allocate `bytes` for `what`.
    #[error(
        "CUDA out of memory allocating {what}: {bytes} bytes ({mib:.1} MiB) requested, {free_mib:.1} MiB free of {total_mib:.1} MiB"
    )]
    OutOfMemory {
        what: String,
        bytes: usize,
        mib: f64,
        free_mib: f64,
        total_mib: f64,
    },
    /// A CUDA driver call failed.
    #[error("CUDA error in {op}: {message}")]
    Cuda { op: String, message: String },
    /// A cuBLAS call failed.
    #[error("cuBLAS error in {op}: {message}")]
    Blas { op: String, message: String },
    /// A cuDNN call failed (its fused attention is optional: see docs/GPU.md).
    #[error("cuDNN error in {op}: {message}")]
    Cudnn { op: String, message: String },
    /// NVRTC refused a kernel source.
    #[error("NVRTC could not compile the kernels ({arch}): {log}")]
    Compile { arch: String, log: String },
    /// The checkpoint could not be loaded.
    #[error(transparent)]
    Weights(#[from] WeightError),
    /// Inputs that do not fit the tower.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A config this backend does not run.
    #[error("unsupported by the GPU backend: {0}")]
    Unsupported(String),
}

impl GpuError {
    pub(crate) fn cuda(op: impl Into<String>, e: cudarc::driver::DriverError) -> Self {
        GpuError::Cuda {
            op: op.into(),
            message: format!("{e:?}"),
        }
    }
    pub(crate) fn blas(op: impl Into<String>, e: cudarc::cublas::result::CublasError) -> Self {
        GpuError::Blas {
            op: op.into(),
            message: format!("{e:?}"),
        }
    }
}

impl From<GpuError> for TowerError {
    fn from(e: GpuError) -> Self {
        match e {
            GpuError::Input(i) => TowerError::Input(i),
            other => TowerError::Backend {
                backend: "gpu".into(),
                message: other.to_string(),
            },
        }
    }
}
