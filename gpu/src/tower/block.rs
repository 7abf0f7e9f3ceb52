//! A block of the GPU tower: the row kernels (RMSNorm, the bias + residual add fused with the
//! next norm), the clamped SwiGLU, and the block itself (norm1, attention, residual, norm2, MLP,
//! residual), as `reference/src/cpu.rs` `block_scratch` on the CPU.

use super::attention::Geo;
use super::weights::{BlockW, Ws};
use super::{GpuTower, Taps, half_or, wants};
use crate::device::{DBuf, Dt, arg};
use crate::error::GpuError;

impl GpuTower {
    /// Launch shape of the row kernels (one warp a row): 8 rows a block (`ROW_WARPS`), or one
    /// when there are few rows, so that they spread over the SMs (64 rows in blocks of 8 kept
    /// 8 of 132 SMs busy; measured on the 112x112 image: bias_residual_rms 12.6 us a launch).
    pub(super) fn row_launch(rows: usize) -> Result<((u32, u32, u32), u32), GpuError> {
        let per = if rows < 2 * 132 * 8 { 1 } else { 8 };
        let blocks = u32::try_from(rows.div_ceil(per).max(1))
            .map_err(|_| GpuError::Unsupported(format!("{rows} rows for a row kernel")))?;
        Ok(((blocks, 1, 1), 32 * per as u32))
    }

    /// RMSNorm of `x` (f32) into `y`: act, or IEEE half when `f16`.
    pub(super) fn rms(
        &self,
        x: &DBuf,
        w: &DBuf,
        y: &DBuf,
        rows: usize,
        cols: usize,
        f16: bool,
    ) -> Result<(), GpuError> {
        let (r, c, eps) = (rows as i64, cols as i32, self.cfg.rms_norm_eps as f32);
        let (grid, threads) = Self::row_launch(rows)?;
        self.dev.launch(
            "rms_norm",
            grid,
            threads,
            &[
                arg(x.ptr),
                arg(w.ptr),
                arg(y.ptr),
                arg(r),
                arg(c),
                arg(eps),
                arg(f16 as i32),
            ],
        )
    }

    /// `v = h + b` (`h` f32, or IEEE half when `h16`), `x += v`; `h_out` (`h` itself when that is
    /// f32, see [`GpuTower::branch_tap`]) gets `v` (a wanted tap).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bias_residual(
        &self,
        h: &DBuf,
        h16: bool,
        b: Option<&DBuf>,
        x: &DBuf,
        h_out: Option<&DBuf>,
        rows: usize,
        cols: usize,
    ) -> Result<(), GpuError> {
        let (r, c) = (rows as i64, cols as i32);
        let bp = b.map_or(0u64, |b| b.ptr);
        let (keep, op) = Self::keep_args(h, h_out);
        self.dev.launch(
            "bias_residual",
            self.dev.grid_for(rows * cols),
            256,
            &[
                arg(h.ptr),
                arg(bp),
                arg(x.ptr),
                arg(op),
                arg(r),
                arg(c),
                arg(keep),
                arg(h16 as i32),
            ],
        )
    }

    /// The kernels' `keep_h` flag and `h_out` pointer for a branch tap going to `h_out`: the
    /// kernels write through `h` itself when `h_out` is `h` (their pointers are restrict).
    pub(super) fn keep_args(h: &DBuf, h_out: Option<&DBuf>) -> (i32, u64) {
        match h_out {
            None => (0, 0),
            Some(o) if o.ptr == h.ptr => (1, 0),
            Some(o) => (1, o.ptr),
        }
    }

    /// `bias_residual` then `rms` (weight `norm_w`, into `y`; IEEE half when `f16`) as one
    /// kernel when the row fits in a warp's registers (`cols <= 2048`), else the two kernels.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bias_residual_norm(
        &self,
        h: &DBuf,
        h16: bool,
        b: Option<&DBuf>,
        x: &DBuf,
        h_out: Option<&DBuf>,
        norm_w: &DBuf,
        y: &DBuf,
        rows: usize,
        cols: usize,
        f16: bool,
    ) -> Result<(), GpuError> {
        if cols > 32 * 64 {
            self.bias_residual(h, h16, b, x, h_out, rows, cols)?;
            return self.rms(x, norm_w, y, rows, cols, f16);
        }
        let (r, c) = (rows as i64, cols as i32);
        let eps = self.cfg.rms_norm_eps as f32;
        let bp = b.map_or(0u64, |b| b.ptr);
        let (keep, op) = Self::keep_args(h, h_out);
        let (grid, threads) = Self::row_launch(rows)?;
        // the model's hidden size has a kernel of its own (fewer registers a thread)
        let kernel = if cols == 1024 {
            "bias_residual_rms_1024"
        } else {
            "bias_residual_rms"
        };
        self.dev.launch(
            kernel,
            grid,
            threads,
            &[
                arg(h.ptr),
                arg(bp),
                arg(x.ptr),
                arg(norm_w.ptr),
                arg(y.ptr),
                arg(r),
                arg(c),
                arg(op),
                arg(keep),
                arg(eps),
                arg(f16 as i32),
                arg(h16 as i32),
            ],
        )
    }

    /// Where a block's branch output `h + b` goes when its tap `wanted`: back into `ws.h` when
    /// that holds f32, else (a half GEMM output) the f32 scratch `ws.tq` (its q_norm tap was
    /// handed over already); nowhere when not wanted.
    pub(super) fn branch_tap<'w>(&self, ws: &'w Ws, wanted: bool, h16: bool) -> Option<&'w DBuf> {
        match (wanted, h16) {
            (false, _) => None,
            (true, false) => Some(&ws.h),
            (true, true) => Some(ws.tq.as_ref().expect("allocated when taps are wanted")),
        }
    }

    /// The clamped SwiGLU of `gu` (+ `b`) into `out`; `half`: `gu` holds IEEE half and `out`
    /// gets IEEE half (else f32 in, act out).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn swiglu(
        &self,
        gu: &DBuf,
        b: Option<&DBuf>,
        out: &DBuf,
        rows: usize,
        width: usize,
        half: bool,
    ) -> Result<(), GpuError> {
        let (r, wdt, lim) = (rows as i64, width as i32, self.cfg.swiglu_limit as f32);
        let bp = b.map_or(0u64, |b| b.ptr);
        // x: column groups (8 or 4 columns a thread when the types and width allow: the
        // kernel's SWIGLU_PER), y: rows (grid-stride).
        let per = if half && width.is_multiple_of(8) {
            8
        } else if width.is_multiple_of(4) {
            4
        } else {
            1
        };
        let gx = width.div_ceil(per * 256).max(1);
        let gy = rows.clamp(1, 65535);
        self.dev.launch(
            "swiglu",
            (gx as u32, gy as u32, 1),
            256,
            &[
                arg(gu.ptr),
                arg(bp),
                arg(out.ptr),
                arg(r),
                arg(wdt),
                arg(lim),
                arg(half as i32),
                arg(half as i32),
            ],
        )
    }

    /// Block `i` on the residual stream `ws.x`. `xn_ready`: `ws.xn` already holds this block's
    /// norm1 output (fused into the previous block's last residual add, in this block's qkv
    /// input type). `next`: the next block, to fuse its norm1 into this block's last residual add.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_dev(
        &self,
        i: usize,
        ws: &Ws,
        geo: &Geo,
        taps: Taps<'_, '_>,
        xn_ready: bool,
        next: Option<&BlockW>,
    ) -> Result<(), GpuError> {
        let cfg = &self.cfg;
        let (n, d, inter) = (geo.n, cfg.hidden_size, cfg.intermediate_size);
        let w = &self.w.blocks[i];
        let dev = &self.dev;
        let name = |s: &str| {
            if s.is_empty() {
                format!("blocks.{i}")
            } else {
                format!("blocks.{i}.{s}")
            }
        };

        // The GEMM input/output types of this block: act / f32, or IEEE half where proven.
        let (qh, mh) = (w.qkv_f16, w.mlp_f16);
        if !xn_ready {
            self.rms(&ws.x, &w.norm1, &ws.xn, n, d, qh)?;
        }
        self.emit_as(
            taps,
            &name("norm1"),
            &ws.xn,
            half_or(qh, ws.xn.dt),
            n,
            d,
            d,
            0,
        )?;
        self.attention_dev(i, ws, geo, taps)?;
        let (po, dno) = (w.proj_out_f16, w.down_out_f16);
        let h_tap = self.branch_tap(ws, wants(taps, &name("attn")), po);
        self.bias_residual_norm(
            &ws.h,
            po,
            w.proj_b.as_ref(),
            &ws.x,
            h_tap,
            &w.norm2,
            &ws.xn,
            n,
            d,
            mh,
        )?;
        if let Some(t) = h_tap {
            self.emit(taps, &name("attn"), t, n, d, d, 0)?;
        }
        self.emit_as(
            taps,
            &name("norm2"),
            &ws.xn,
            half_or(mh, ws.xn.dt),
            n,
            d,
            d,
            0,
        )?;
        dev.linear_to(
            &ws.xn,
            &w.gate_up_w,
            &ws.gu,
            half_or(mh, Dt::F32),
            n,
            d,
            2 * inter,
        )?;
        self.swiglu(&ws.gu, w.gate_up_b.as_ref(), &ws.m, n, inter, mh)?;
        dev.linear_to(&ws.m, &w.down_w, &ws.h, half_or(dno, Dt::F32), n, inter, d)?;
        let h_tap = self.branch_tap(ws, wants(taps, &name("mlp")), dno);
        match next {
            Some(nb) => self.bias_residual_norm(
                &ws.h,
                dno,
                w.down_b.as_ref(),
                &ws.x,
                h_tap,
                &nb.norm1,
                &ws.xn,
                n,
                d,
                nb.qkv_f16,
            )?,
            None => self.bias_residual(&ws.h, dno, w.down_b.as_ref(), &ws.x, h_tap, n, d)?,
        }
        if let Some(t) = h_tap {
            self.emit(taps, &name("mlp"), t, n, d, d, 0)?;
        }
        self.emit(taps, &name(""), &ws.x, n, d, d, 0)?;
        Ok(())
    }
}
