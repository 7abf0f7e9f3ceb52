//! The GPU tower's head: post_layernorm, the 2x2 downsample and the merger (proj, LayerNorm +
//! exact-erf GELU, clamped SwiGLU), as `reference/src/cpu.rs` `post_norm_f`, `downsample_f` and
//! `merger_f` on the CPU.

use super::{GpuTower, Taps, wants};
use crate::device::{DBuf, Dt, arg};
use crate::error::GpuError;

impl GpuTower {
    /// post_layernorm of `x` [N, D] f32 into a new act buffer.
    pub(super) fn post_norm_dev(&self, x: &DBuf, n: usize) -> Result<DBuf, GpuError> {
        let d = self.cfg.hidden_size;
        let y = self
            .dev
            .alloc("post_layernorm [N, D]", n * d, self.dev.act())?;
        self.rms(x, &self.w.post_norm, &y, n, d, false)?;
        Ok(y)
    }

    /// The 2x2 downsample: act [N, D] viewed as [G, m*m*D] -> f32 [G, O].
    pub(super) fn downsample_dev(&self, y: &DBuf, n: usize) -> Result<DBuf, GpuError> {
        let (d, o, unit) = (
            self.cfg.hidden_size,
            self.cfg.out_hidden_size,
            self.cfg.merge_unit(),
        );
        let g = n / unit;
        let ds = self.dev.alloc("downsample [G, O] f32", g * o, Dt::F32)?;
        self.dev.linear(y, &self.w.down_w, &ds, g, unit * d, o)?;
        self.add_bias(&ds, &self.w.down_b, g, o)?;
        Ok(ds)
    }

    /// The merger on f32 [G, O]; returns f32 [G, O].
    pub(super) fn merger_dev(
        &self,
        ds: &DBuf,
        g: usize,
        taps: Taps<'_, '_>,
    ) -> Result<DBuf, GpuError> {
        let (o, p) = (
            self.cfg.out_hidden_size,
            self.cfg.projection_intermediate_size,
        );
        let dev = &self.dev;
        let act = dev.act();
        let xin = if dev.bf16 {
            let xa = dev.alloc("merger input [G, O] bf16", g * o, act)?;
            let cnt = (g * o) as i64;
            dev.launch(
                "cast_act",
                dev.grid_for(g * o),
                256,
                &[arg(ds.ptr), arg(xa.ptr), arg(cnt)],
            )?;
            Some(xa)
        } else {
            None
        };
        let mp = dev.alloc("merger.proj [G, O] f32", g * o, Dt::F32)?;
        dev.linear(xin.as_ref().unwrap_or(ds), &self.w.m_proj_w, &mp, g, o, o)?;
        drop(xin);
        self.emit(taps, "merger.proj", &mp, g, o, o, 0)?;
        let ln = if wants(taps, "merger.post_projection_norm") {
            Some(dev.alloc("merger.post_projection_norm tap [G, O] f32", g * o, Dt::F32)?)
        } else {
            None
        };
        let a1 = dev.alloc("merger.act1 [G, O]", g * o, act)?;
        let (lnp, cols, eps) = (ln.as_ref().map_or(0u64, |b| b.ptr), o as i32, 1e-5f32);
        dev.launch(
            "layer_norm_gelu",
            (g as u32, 1, 1),
            256,
            &[
                arg(mp.ptr),
                arg(self.w.m_norm_w.ptr),
                arg(self.w.m_norm_b.ptr),
                arg(lnp),
                arg(a1.ptr),
                arg(cols),
                arg(eps),
            ],
        )?;
        if let Some(ln) = &ln {
            self.emit(taps, "merger.post_projection_norm", ln, g, o, o, 0)?;
        }
        self.emit(taps, "merger.act1", &a1, g, o, o, 0)?;
        let gu = dev.alloc("merger gate|up [G, 2P] f32", g * 2 * p, Dt::F32)?;
        dev.linear(&a1, &self.w.m_gate_up_w, &gu, g, o, 2 * p)?;
        self.emit(taps, "merger.gate_proj", &gu, g, p, 2 * p, 0)?;
        self.emit(taps, "merger.up_proj", &gu, g, p, 2 * p, p)?;
        let mm = dev.alloc("merger hidden [G, P]", g * p, act)?;
        self.swiglu(&gu, None, &mm, g, p, false)?;
        drop(gu);
        let out = dev.alloc("merger output [G, O] f32", g * o, Dt::F32)?;
        dev.linear(&mm, &self.w.m_down_w, &out, g, p, o)?;
        self.emit(taps, "merger.down_proj", &out, g, o, o, 0)?;
        self.emit(taps, "merger", &out, g, o, o, 0)?;
        Ok(out)
    }
}
