//! CUDA graphs of the whole forward: one per segment layout (the images' grids in order),
//! captured on the layout's second forward, kept in a bounded least-recently-used cache and
//! replayed.
//!
//! A graph replays the very kernels, GEMM algorithms and cuDNN plans of the plain forward with
//! the same arguments, so its rows are the plain forward's bits (`graphs_match_plain_forward` in
//! `tests/device.rs` checks it on the device in both precisions). No padding: a layout gets its
//! own graph. What a graph holds on the device: its geometry (rope tables, attention tiles,
//! cuDNN workspace), an input and an output buffer, and the forward's workspace as graph
//! memory (CUDA may share that physical memory between graphs replayed on one stream). The
//! cache is bounded by entries and by tokens summed over the kept graphs (see [`GraphLimits`]).

use super::GpuTower;
use super::attention::Geo;
use crate::device::{DBuf, Dt};
use crate::error::GpuError;
use cudarc::driver::{CudaGraph, sys};
use glm5v_reference::geometry::Grid;
use std::collections::VecDeque;

/// Default most graphs kept.
pub const GRAPHS_DEFAULT: usize = 16;
/// Default most tokens summed over the kept graphs (a 2016x3024 image is 23 814 tokens).
pub const GRAPH_TOKENS_DEFAULT: usize = 65_536;
/// Layouts remembered as seen once (a graph is captured when one comes back).
const SEEN: usize = 256;

/// Bounds of the graph cache; `GLM5V_GPU_GRAPHS` (entries, 0 turns graphs off) and
/// `GLM5V_GPU_GRAPH_TOKENS` set them from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphLimits {
    pub entries: usize,
    pub tokens: usize,
}

impl Default for GraphLimits {
    fn default() -> Self {
        Self {
            entries: GRAPHS_DEFAULT,
            tokens: GRAPH_TOKENS_DEFAULT,
        }
    }
}

impl GraphLimits {
    /// The limits from `GLM5V_GPU_GRAPHS` and `GLM5V_GPU_GRAPH_TOKENS`, else the defaults; an
    /// unparsable value is an error naming the variable.
    pub fn from_env() -> Result<Self, GpuError> {
        Ok(Self {
            entries: crate::env::usize_var("GLM5V_GPU_GRAPHS", GRAPHS_DEFAULT, 0)?,
            tokens: crate::env::usize_var("GLM5V_GPU_GRAPH_TOKENS", GRAPH_TOKENS_DEFAULT, 0)?,
        })
    }
}

/// Counters of the graph cache, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Graphs kept now and the tokens they cover.
    pub entries: usize,
    pub tokens: usize,
    pub captures: u64,
    pub replays: u64,
    pub evictions: u64,
    /// Why graphs are off for this tower (a capture failed), if they are.
    pub disabled: Option<String>,
    /// Device memory the driver holds for graphs now (`CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`)
    /// and at most since the process began (`..._USED_MEM_HIGH`); `None` when the query failed.
    pub reserved_bytes: Option<u64>,
    pub used_high_bytes: Option<u64>,
}

struct Entry {
    key: Vec<Grid>,
    tokens: usize,
    /// Kept alive for the graph: it reads their device addresses.
    _geo: Geo,
    px: DBuf,
    out: DBuf,
    graph: CudaGraph,
}

// SAFETY: CUDA graph objects must not be used from two threads at once; every use of an
// entry is under the tower's lock (`GpuTower::guard`), which serialises them.
unsafe impl Send for Entry {}

/// The cache, held under the tower's lock.
pub(super) struct Graphs {
    limits: GraphLimits,
    /// Least recently used first.
    entries: Vec<Entry>,
    seen: VecDeque<Vec<Grid>>,
    stats: GraphStats,
}

impl Graphs {
    pub(super) fn new(limits: GraphLimits) -> Self {
        Self {
            limits,
            entries: Vec::new(),
            seen: VecDeque::new(),
            stats: GraphStats::default(),
        }
    }

    pub(super) fn limits(&self) -> GraphLimits {
        self.limits
    }

    fn tokens(&self) -> usize {
        self.entries.iter().map(|e| e.tokens).sum()
    }

    /// Drops the least recently used graphs until `extra` more graphs of `tokens` in all fit
    /// both bounds.
    fn make_room(&mut self, extra: usize, tokens: usize) {
        while !self.entries.is_empty()
            && (self.entries.len() + extra > self.limits.entries
                || self.tokens() + tokens > self.limits.tokens)
        {
            self.entries.remove(0);
            self.stats.evictions += 1;
        }
    }

    /// The input buffer of graph `i` (the pixel values its replay reads).
    pub(super) fn input(&self, i: usize) -> &DBuf {
        &self.entries[i].px
    }

    /// The output buffer of graph `i` (the embeddings after its replay).
    pub(super) fn output(&self, i: usize) -> &DBuf {
        &self.entries[i].out
    }
}

impl GpuTower {
    /// Sets the graph cache's bounds (dropping graphs beyond them); `entries` 0 turns graphs off.
    pub fn set_graph_limits(&self, limits: GraphLimits) {
        let mut st = self.guard();
        st.limits = limits;
        st.make_room(0, 0);
        if self.dev.ctx.bind_to_thread().is_ok() {
            // SAFETY: a valid device handle; returns unused graph memory to the OS.
            unsafe { sys::cuDeviceGraphMemTrim(self.dev.ctx.cu_device()) };
        }
    }

    /// The graph cache's counters and the driver's graph memory.
    pub fn graph_stats(&self) -> GraphStats {
        let st = self.guard();
        let mut s = st.stats.clone();
        s.entries = st.entries.len();
        s.tokens = st.tokens();
        let query = |attr| {
            let mut v: u64 = 0;
            // SAFETY: a valid device handle and a u64 out-value, as these attributes require.
            let r = unsafe {
                sys::cuDeviceGetGraphMemAttribute(
                    self.dev.ctx.cu_device(),
                    attr,
                    &mut v as *mut u64 as *mut _,
                )
            };
            (r == sys::cudaError_enum::CUDA_SUCCESS).then_some(v)
        };
        let _ = self.dev.ctx.bind_to_thread();
        use sys::CUgraphMem_attribute as M;
        s.reserved_bytes = query(M::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        s.used_high_bytes = query(M::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH);
        s
    }

    /// The index of a ready graph for `grids` in `st` (capturing it when this layout was seen
    /// once before), or `None` when this forward runs without one: graphs off, a layout seen
    /// for the first time, or one larger than the token bound. A failed capture turns graphs
    /// off for this tower with one line on stderr (the forward then runs plain: same bits).
    pub(super) fn graph_for(
        &self,
        st: &mut Graphs,
        grids: &[Grid],
        n: usize,
    ) -> Result<Option<usize>, GpuError> {
        if st.limits.entries == 0 || st.stats.disabled.is_some() || n > st.limits.tokens {
            return Ok(None);
        }
        if let Some(i) = st.entries.iter().position(|e| e.key == grids) {
            let e = st.entries.remove(i);
            st.entries.push(e);
            return Ok(Some(st.entries.len() - 1));
        }
        match st.seen.iter().position(|k| k == grids) {
            None => {
                if st.seen.len() >= SEEN {
                    st.seen.pop_front();
                }
                st.seen.push_back(grids.to_vec());
                return Ok(None);
            }
            Some(i) => {
                st.seen.remove(i);
            }
        }
        st.make_room(1, n);
        match self.capture(grids) {
            Ok(e) => {
                st.entries.push(e);
                st.stats.captures += 1;
                Ok(Some(st.entries.len() - 1))
            }
            // Out of memory is the caller's to see: the plain forward would need the same.
            Err(e @ GpuError::OutOfMemory { .. }) => Err(e),
            Err(e) => {
                eprintln!(
                    "glm5v: CUDA graph capture failed ({e}); this GPU tower runs without graphs"
                );
                st.stats.disabled = Some(e.to_string());
                Ok(None)
            }
        }
    }

    /// Captures the forward of `grids` into a graph with its own input and output buffers.
    fn capture(&self, grids: &[Grid]) -> Result<Entry, GpuError> {
        let cfg = &self.cfg;
        let geo = self.geo_for_grids(grids, false)?;
        let (n, o) = (geo.n, cfg.out_hidden_size);
        let g = n / cfg.merge_unit();
        let px = self.dev.alloc(
            "graph input: pixel values [N, patch_dim] f32",
            n * cfg.patch_dim(),
            Dt::F32,
        )?;
        let out = self
            .dev
            .alloc("graph output: embeddings [G, O] f32", g * o, Dt::F32)?;
        let stream = &self.dev.stream;
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| GpuError::cuda("cuStreamBeginCapture", e))?;
        let body = (|| {
            let mut none = None;
            let y = self.forward_dev(&px, &geo, &mut none)?;
            self.dev.copy(&y, &out, g * o * Dt::F32.size())
        })();
        // Always end the capture, also after a failed body, so the stream is usable again.
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        body?;
        let graph = ended
            .map_err(|e| GpuError::cuda("cuStreamEndCapture / cuGraphInstantiate", e))?
            .ok_or_else(|| GpuError::Cuda {
                op: "cuStreamEndCapture".into(),
                message: "the capture recorded no graph".into(),
            })?;
        graph
            .upload()
            .map_err(|e| GpuError::cuda("cuGraphUpload", e))?;
        Ok(Entry {
            key: grids.to_vec(),
            tokens: n,
            _geo: geo,
            px,
            out,
            graph,
        })
    }

    /// Replays graph `i` of `st` on `pixels` (f32 [N, patch_dim], contiguous); the embeddings
    /// are then in its output buffer ([`Graphs::output`]); `None` replays on the pixels already
    /// uploaded.
    pub(super) fn replay(
        &self,
        st: &mut Graphs,
        i: usize,
        pixels: Option<&[f32]>,
    ) -> Result<(), GpuError> {
        let e = &st.entries[i];
        if let Some(p) = pixels {
            self.dev.upload_into(&e.px, p)?;
        }
        e.graph
            .launch()
            .map_err(|e| GpuError::cuda("cuGraphLaunch", e))?;
        st.stats.replays += 1;
        Ok(())
    }
}
