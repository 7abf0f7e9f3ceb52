//! The CPU tower: upstream's `Glm5NextVisionModel.forward`, stage by stage, in f32 or f64.

use crate::config::VisionConfig;
use crate::error::{InputError, TowerError};
use crate::geometry::{self, Grid, check_cols, check_shape};
use crate::kernels::act::{swiglu_rows, swiglu_rows_into};
use crate::kernels::attention::attention;
use crate::kernels::gemm::{LinearWeight, Par, add_residual};
use crate::kernels::{norm, rope, team};
use crate::real::Real;
use crate::taps::TapSink;
use crate::tower::{Tower, progress};
use crate::weights::TowerWeights;
use ndarray::{Array2, ArrayView1, ArrayView2, s};

/// Buffers for a block's temporaries, reused across the blocks of one forward: the normed input
/// of the attention, then of the MLP `[N, D]`; qkv `[N, 3D]`; q and k `[N, 2D]`; gate|up
/// `[N, 2I]`; the SwiGLU output `[N, I]`; the hidden state after attention `[N, D]`; the
/// block's output `[N, D]` (the previous block's input, handed back by the forward). Fresh
/// multi-megabyte allocations come from the system as new pages (glibc maps anything over
/// 32 MB afresh), and even a reused heap block was zeroed first: a serial memset of 256 KiB
/// to 1 MiB per array at 8x8.
#[derive(Default)]
struct Scratch<F> {
    xn: Vec<F>,
    qkv: Vec<F>,
    qk: Vec<F>,
    gu: Vec<F>,
    m: Vec<F>,
    h: Vec<F>,
    out: Vec<F>,
}

/// `y = linear(x) + residual`, the residual added by the product's last step, unless a tap
/// wants the product alone (`name`): then it is emitted and the residual added after.
fn plus_residual<F: Real>(
    lin: &LinearWeight<F>,
    x: ArrayView2<F>,
    bias: Option<ArrayView1<F>>,
    residual: ArrayView2<F>,
    taps: Taps<'_, '_>,
    name: impl Fn() -> String,
    y: &mut [F],
) {
    let split = wanted(taps, &name);
    lin.apply_add_into(x, bias, (!split).then_some(residual), Par::Pool, y);
    if split {
        emit(taps, name, as_rows(y, residual.ncols()));
        add_residual(y, residual);
    }
}

/// `v` as rows of `cols` values.
fn as_rows<F>(v: &[F], cols: usize) -> ArrayView2<'_, F> {
    ArrayView2::from_shape((v.len().checked_div(cols).unwrap_or(0), cols), v).expect("whole rows")
}

/// A `Linear` weight packed for the f32 (or f64) mode, or for the bf16 mode.
fn pack<F: Real>(w: Array2<F>, bf16: bool) -> LinearWeight<F> {
    if bf16 {
        LinearWeight::new_bf16(w)
    } else {
        LinearWeight::new(w)
    }
}

/// Every value rounded to bf16 (to nearest even), in place.
fn round_all<F: Real>(v: &mut [F]) {
    v.iter_mut()
        .for_each(|x| *x = crate::kernels::gemm::round_bf16(*x));
}

/// `buf` as a slice of `len` (grown once; contents are overwritten by the caller).
fn sized<F: Real>(buf: &mut Vec<F>, len: usize) -> &mut [F] {
    if buf.len() != len {
        buf.clear();
        buf.resize(len, F::ZERO);
    }
    buf.as_mut_slice()
}

/// Leading blocks whose products take half-precision inputs in the bf16 mode by default.
pub const HALF_INPUT_BLOCKS: usize = 4;

/// Which block products the bf16 mode feeds inputs at an IEEE half's precision (11 significant
/// bits) instead of bf16's 8 (see [`LinearWeight::with_half_inputs`]), as the GPU's bf16 mode
/// runs its block products in half: the products, and how many leading blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HalfInputs {
    pub products: Vec<&'static str>,
    /// Blocks `0..blocks` (`usize::MAX`: every block).
    pub blocks: usize,
}

impl HalfInputs {
    fn on(&self, block: usize, product: &str) -> bool {
        block < self.blocks && self.products.contains(&product)
    }
}

/// [`HalfInputs`] from `GLM5V_CPU_BF16_HALF`'s value, with warnings for what it could not read.
///
/// Unset: every product of the first [`HALF_INPUT_BLOCKS`] blocks. A rounding error made early
/// is carried and grown by every block after it: on tower/full (24 blocks) half inputs in
/// blocks 0-3 alone take the worst error from 1.90e-2 to 1.25e-2 (all 24 blocks: 1.03e-2;
/// blocks 18-23 alone: 1.89e-2; the GPU's bf16: 1.06e-2), for a sixth of the cost of all
/// (an input at half's precision is two bf16 parts, two products, on the bf16 units; on the
/// f32 kernels it is only another rounding). `none`: bf16 inputs everywhere (the fastest);
/// `all`: every block; `first:N`: every product of the first N blocks; a comma list of `qkv`,
/// `proj`, `gate_up`, `down`: those products in every block.
pub fn parse_half_inputs(value: Option<&str>) -> (HalfInputs, Vec<String>) {
    const ALL: [&str; 4] = ["qkv", "proj", "gate_up", "down"];
    let default = HalfInputs {
        products: ALL.to_vec(),
        blocks: HALF_INPUT_BLOCKS,
    };
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return (default, Vec::new());
    };
    if let Some(n) = v.strip_prefix("first:") {
        return match n.trim().parse() {
            Ok(blocks) => (
                HalfInputs {
                    products: ALL.to_vec(),
                    blocks,
                },
                Vec::new(),
            ),
            Err(_) => (
                default,
                vec![format!(
                    "GLM5V_CPU_BF16_HALF={v}: `first:` takes a number of blocks; using the \
                     first {HALF_INPUT_BLOCKS}"
                )],
            ),
        };
    }
    let words: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let warnings: Vec<String> = words
        .iter()
        .filter(|w| !ALL.contains(w) && !["all", "none"].contains(w))
        .map(|w| {
            format!("GLM5V_CPU_BF16_HALF: unknown product `{w}` (known: qkv, proj, gate_up, down, all, none, first:N)")
        })
        .collect();
    let products: Vec<&'static str> = ALL
        .into_iter()
        .filter(|p| words.iter().any(|w| w == p || *w == "all"))
        .collect();
    let blocks = if products.is_empty() { 0 } else { usize::MAX };
    (HalfInputs { products, blocks }, warnings)
}

/// The load warning of the bf16 mode where its products run on the f32 kernels after rounding
/// their inputs (a CPU, or a `GLM5V_CPU_ISA` level, without bf16 arithmetic; or an Intel CPU
/// whose AVX512-BF16 unit runs slower than its f32 FMAs): there the mode costs the f32 mode's
/// time and more (the rounding pass) and is less accurate.
fn bf16_warning(isa: crate::kernels::isa::Isa, dpbf16: bool) -> Option<String> {
    use crate::kernels::isa::Isa;
    if isa < Isa::Avx512Bf16 {
        return Some(format!(
            "bf16 asked for on a CPU without bf16 arithmetic (instruction set {isa}: no \
             AVX512-BF16, no AMX): its products run on the f32 kernels with bf16-rounded \
             inputs, no faster than f32 and less accurate; f32 is the better choice here"
        ));
    }
    (isa == Isa::Avx512Bf16 && !dpbf16).then(|| {
        "bf16 asked for where the AVX512-BF16 kernel is not used (an Intel CPU without AMX, \
         whose vdpbf16ps runs at half its f32 FMAs' rate, or GLM5V_CPU_DPBF16=0): its \
         products run on the f32 kernels with bf16-rounded inputs, no faster than f32 and \
         less accurate; f32 is the better choice here (GLM5V_CPU_DPBF16=1 takes the kernel)"
            .to_string()
    })
}

/// The reference tower on the CPU, computing in `F` (f32: upstream's f32 path; f64: tighter).
pub struct CpuTower<F: Real> {
    /// The norms, biases and config (the `Linear` weight arrays are moved into `lin`).
    weights: TowerWeights<F>,
    lin: Linears<F>,
    /// The bf16 mode ([`CpuTower::new_bf16`]).
    bf16: bool,
}

/// The `Linear` weights of a tower, each as its forward uses it (see [`LinearWeight`]).
struct Linears<F> {
    patch: LinearWeight<F>,
    blocks: Vec<BlockLinears<F>>,
    down: LinearWeight<F>,
    m_proj: LinearWeight<F>,
    m_gate_up: LinearWeight<F>,
    m_down: LinearWeight<F>,
}

struct BlockLinears<F> {
    qkv: LinearWeight<F>,
    proj: LinearWeight<F>,
    gate_up: LinearWeight<F>,
    down: LinearWeight<F>,
}

type Taps<'a, 'b> = &'a mut Option<&'b mut dyn TapSink>;

/// Hands an `F` array to the sink as f32 (no copy in the f32 mode) when it wants `name`.
fn emit<F: Real>(taps: Taps<'_, '_>, name: impl FnOnce() -> String, value: ArrayView2<F>) {
    if let Some(sink) = taps.as_deref_mut() {
        let name = name();
        if sink.wants(&name) {
            let value = value.as_standard_layout();
            let data = F::as_f32s(value.as_slice().expect("standard layout"));
            sink.tap(&name, value.nrows(), value.ncols(), &data);
        }
    }
}

/// Whether the sink (if any) wants the tap `name` (built only when there is a sink, as in
/// [`emit`]).
fn wanted(taps: Taps<'_, '_>, name: impl FnOnce() -> String) -> bool {
    taps.as_deref().is_some_and(|sink| sink.wants(&name()))
}

fn to_real<F: Real>(x: ArrayView2<f32>) -> Array2<F> {
    x.mapv(F::from_f32)
}

fn to_f32<F: Real>(x: Array2<F>) -> Array2<f32> {
    x.mapv(|v| v.to_f64() as f32)
}

impl<F: Real> CpuTower<F> {
    /// Takes the weights; each `Linear` weight is repacked for the panel kernel where `F` has
    /// one on this CPU (f32 with AVX-512), moving it out of `weights` (one copy in memory).
    pub fn new(weights: TowerWeights<F>) -> Self {
        Self::build(weights, false)
    }

    /// The bf16 mode, the GPU's bf16 policy for the products: every `Linear` weight rounded to
    /// bf16 once (a bf16 checkpoint's values already are), the inputs of every `Linear` product
    /// rounded to bf16 and the products accumulated in f32 (AMX `tdpbf16ps`, else AVX512-BF16
    /// `vdpbf16ps`, else the same products on the f32 kernels); the residual stream, norms,
    /// rope and activations in f32. Attention: with AMX, segments longer than 128 tokens take
    /// bf16 q, k, v and probabilities into f32 sums on the unit (`kernels::amx_attention`;
    /// `GLM5V_CPU_AMX_ATTN=0` keeps them f32), shorter ones and every other CPU stay f32 (on
    /// the f32 kernels rounding q, k and v would cost accuracy for no speed: the full-geometry
    /// fixture's worst tap, 64 tokens, goes from 1.90e-2 to 2.02e-2 with them rounded;
    /// `GLM5V_CPU_BF16_ATTN=1` rounds them, to measure it).
    pub fn new_bf16(weights: TowerWeights<F>) -> Self {
        Self::build(weights, true)
    }

    fn build(mut weights: TowerWeights<F>, bf16: bool) -> Self {
        let mut packed = Vec::new();
        let mut take = |w: &mut Array2<F>| packed.push(pack(std::mem::take(w), bf16));
        take(&mut weights.patch_w);
        for b in &mut weights.blocks {
            take(&mut b.qkv_w);
            take(&mut b.proj_w);
            take(&mut b.gate_up_w);
            take(&mut b.down_w);
        }
        take(&mut weights.down_w);
        take(&mut weights.merger.proj_w);
        take(&mut weights.merger.gate_up_w);
        take(&mut weights.merger.down_w);
        Self::from_packed(weights, packed, bf16)
    }

    /// Loads `dir` and repacks each `Linear` weight as soon as it is read (the f32 mode's
    /// kernels when `bf16` is false, the bf16 mode's when true): the whole tower is never in
    /// memory as f32, nor the checkpoint's pages (the peak is the packed weights, one weight in
    /// f32, and what the loader converts at a time).
    pub fn load(dir: &std::path::Path, bf16: bool) -> Result<Self, crate::WeightError> {
        let mut packed = Vec::new();
        let weights = TowerWeights::<F>::load_with(dir, &mut |w| {
            packed.push(pack(w, bf16));
            Array2::from_shape_vec((0, 0), Vec::new()).expect("empty")
        })?;
        Ok(Self::from_packed(weights, packed, bf16))
    }

    /// The tower from weights whose `Linear` arrays were packed into `packed`, in
    /// [`TowerWeights::load_with`]'s order.
    fn from_packed(mut weights: TowerWeights<F>, packed: Vec<LinearWeight<F>>, bf16: bool) -> Self {
        if bf16
            && let Some(w) = bf16_warning(
                crate::kernels::isa::isa(),
                crate::kernels::isa::dpbf16_preferred(),
            )
        {
            weights.warnings.push(w);
        }
        assert_eq!(
            packed.len(),
            4 * weights.blocks.len() + 5,
            "one packed weight per Linear"
        );
        let mut it = packed.into_iter();
        let mut next = || it.next().expect("counted above");
        let patch = next();
        // block products that take half-precision inputs in the bf16 mode, as on the GPU
        let (half, half_warnings) =
            parse_half_inputs(std::env::var("GLM5V_CPU_BF16_HALF").ok().as_deref());
        if bf16 {
            weights.warnings.extend(half_warnings);
        }
        let blocks = (0..weights.blocks.len())
            .map(|i| BlockLinears {
                qkv: next().with_half_inputs(half.on(i, "qkv")),
                proj: next().with_half_inputs(half.on(i, "proj")),
                gate_up: next().with_half_inputs(half.on(i, "gate_up")),
                down: next().with_half_inputs(half.on(i, "down")),
            })
            .collect();
        let lin = Linears {
            patch,
            blocks,
            down: next(),
            m_proj: next(),
            m_gate_up: next(),
            m_down: next(),
        };
        Self { weights, lin, bf16 }
    }

    /// Which kernel runs the blocks' products (`"amx"`, `"avx512-bf16"`, `"panels"`, `"gemm"`).
    pub fn kernel(&self) -> &'static str {
        self.lin
            .blocks
            .first()
            .map_or(self.lin.patch.kernel(), |b| b.qkv.kernel())
    }

    /// Load-time warnings of the weights (non-finite values), each naming its tensor.
    pub fn warnings(&self) -> &[String] {
        &self.weights.warnings
    }

    fn cfg(&self) -> &VisionConfig {
        &self.weights.config
    }

    /// `[N, patch_dim]` -> `[N, D]`.
    pub fn patch_embed_f(&self, px: ArrayView2<F>) -> Array2<F> {
        self.lin
            .patch
            .apply(px, Some(self.weights.patch_b.view()), Par::Pool)
    }

    /// `(cos, sin)`, each `[N, head_dim]`.
    pub fn rope_f(&self, grid_thw: &[Grid]) -> (Array2<F>, Array2<F>) {
        let cfg = self.cfg();
        let pos = geometry::positions(grid_thw, cfg.spatial_merge_size);
        rope::tables(&pos, cfg.head_dim(), cfg.rope_parameters.rope_theta)
    }

    /// `Glm5NextVisionBlock.forward`: `x + attn(norm1(x))`, then `+ mlp(norm2(.))`. (Its
    /// temporaries are fresh on each call; the forward reuses one set across its blocks.)
    pub fn block_f(
        &self,
        i: usize,
        x: ArrayView2<F>,
        cos: ArrayView2<F>,
        sin: ArrayView2<F>,
        cu_seqlens: &[usize],
        taps: Taps<'_, '_>,
    ) -> Array2<F> {
        self.block_scratch(i, x, cos, sin, cu_seqlens, taps, &mut Scratch::default())
    }

    /// [`Self::block_f`] with the forward's reusable buffers.
    #[allow(clippy::too_many_arguments)]
    fn block_scratch(
        &self,
        i: usize,
        x: ArrayView2<F>,
        cos: ArrayView2<F>,
        sin: ArrayView2<F>,
        cu_seqlens: &[usize],
        taps: Taps<'_, '_>,
        scratch: &mut Scratch<F>,
    ) -> Array2<F> {
        let Scratch {
            xn: xn_buf,
            qkv: qkv_buf,
            qk: qk_buf,
            gu: gu_buf,
            m: m_buf,
            h: h_buf,
            out: out_buf,
        } = scratch;
        let n = x.nrows();
        let cfg = self.cfg();
        let w = &self.weights.blocks[i];
        let lw = &self.lin.blocks[i];
        let (d, heads) = (cfg.hidden_size, cfg.num_heads);
        let eps = cfg.rms_norm_eps;

        // attention
        let x1 = sized(xn_buf, n * d);
        norm::rms_norm_into(x, w.norm1.view(), eps, x1);
        let x1 = as_rows(x1, d); // [N, D]
        emit(taps, || format!("blocks.{i}.norm1"), x1.view());
        let qkv = sized(qkv_buf, n * 3 * d);
        lw.qkv.apply_into(
            x1.view(),
            w.qkv_b.as_ref().map(|b| b.view()),
            Par::Pool,
            qkv,
        );
        let qkv = as_rows(qkv, 3 * d); // [N, 3D]
        emit(taps, || format!("blocks.{i}.attn.qkv"), qkv.view());
        // q_norm / k_norm, then the rope, in one pass: [N, 2D] (q's columns, then k's)
        let want_normed = wanted(taps, || format!("blocks.{i}.attn.q_norm"))
            || wanted(taps, || format!("blocks.{i}.attn.k_norm"));
        let qk = sized(qk_buf, n * 2 * d);
        let mut normed = want_normed.then(|| vec![F::ZERO; n * 2 * d]);
        rope::qk_norm_rope_into(
            qkv.view(),
            d,
            w.q_norm.view(),
            w.k_norm.view(),
            eps,
            cos,
            sin,
            qk,
            normed.as_deref_mut(),
        );
        if let Some(normed) = &normed {
            let normed = as_rows(normed, 2 * d);
            emit(
                taps,
                || format!("blocks.{i}.attn.q_norm"),
                normed.slice(s![.., ..d]),
            );
            emit(
                taps,
                || format!("blocks.{i}.attn.k_norm"),
                normed.slice(s![.., d..]),
            );
        }
        if self.bf16 && std::env::var("GLM5V_CPU_BF16_ATTN").as_deref() == Ok("1") {
            // attention's products take bf16 q, k and v (the GPU's bf16 attention inputs)
            round_all(qk);
            let qkv = &mut qkv_buf[..n * 3 * d];
            team::for_each_chunk_mut(qkv, 3 * d, |_, row| round_all(&mut row[2 * d..]));
        }
        let qkv = as_rows(&qkv_buf[..n * 3 * d], 3 * d); // [N, 3D]
        let qk = as_rows(qk, 2 * d);
        let (q, k) = (qk.slice(s![.., ..d]), qk.slice(s![.., d..]));
        let scale = F::from_f64((cfg.head_dim() as f64).powf(-0.5));
        let v = qkv.slice(s![.., 2 * d..]);
        // [N, D]; the bf16 mode's on the AMX unit where there is one (bf16 q, k, v and
        // probabilities, f32 sums), else f32
        let a = match self.bf16 {
            true => F::attention_bf16(q, k, v, cu_seqlens, heads, scale),
            false => None,
        }
        .unwrap_or_else(|| attention(q, k, v, cu_seqlens, heads, scale));
        emit(taps, || format!("blocks.{i}.attn.proj.input"), a.view());
        // hidden_states + attn(...)
        let h = sized(h_buf, n * d);
        let bias = w.proj_b.as_ref().map(|b| b.view());
        plus_residual(
            &lw.proj,
            a.view(),
            bias,
            x,
            taps,
            || format!("blocks.{i}.attn"),
            h,
        );
        drop(a);
        let h = as_rows(h, d); // [N, D]

        // MLP
        let x2 = sized(xn_buf, n * d);
        norm::rms_norm_into(h.view(), w.norm2.view(), eps, x2);
        let x2 = as_rows(x2, d); // [N, D]
        emit(taps, || format!("blocks.{i}.norm2"), x2.view());
        let inter = lw.gate_up.out_features() / 2;
        let gu = sized(gu_buf, n * 2 * inter);
        lw.gate_up.apply_into(
            x2.view(),
            w.gate_up_b.as_ref().map(|b| b.view()),
            Par::Pool,
            gu,
        );
        let gu = as_rows(gu, 2 * inter); // [N, 2I]
        let m = sized(m_buf, n * inter);
        let mut mv = ndarray::ArrayViewMut2::from_shape((n, inter), m).expect("sized");
        swiglu_rows_into(gu, F::from_f64(cfg.swiglu_limit), mv.view_mut()); // [N, I]
        // hidden_states + mlp(...)
        let out = sized(out_buf, n * d);
        let bias = w.down_b.as_ref().map(|b| b.view());
        plus_residual(
            &lw.down,
            mv.view(),
            bias,
            h,
            taps,
            || format!("blocks.{i}.mlp"),
            out,
        );
        emit(taps, || format!("blocks.{i}"), as_rows(out, d));
        Array2::from_shape_vec((n, d), std::mem::take(out_buf)).expect("sized")
    }

    /// `post_layernorm`.
    pub fn post_norm_f(&self, x: ArrayView2<F>) -> Array2<F> {
        norm::rms_norm(x, self.weights.post_norm.view(), self.cfg().rms_norm_eps)
    }

    /// The Conv2d downsample as one product: `[N, D]` -> `[G, m*m*D]` (free reshape) -> `[G, O]`.
    pub fn downsample_f(&self, x: ArrayView2<F>) -> Array2<F> {
        let unit = self.cfg().merge_unit();
        let x = x.as_standard_layout();
        let (n, d) = x.dim();
        let xr = x
            .view()
            .into_shape_with_order((n / unit, unit * d))
            .expect("contiguous rows");
        self.lin
            .down
            .apply(xr, Some(self.weights.down_b.view()), Par::Pool)
    }

    /// `Glm5NextVisionPatchMerger.forward`.
    pub fn merger_f(&self, x: ArrayView2<F>, taps: Taps<'_, '_>) -> Array2<F> {
        let w = &self.weights.merger;
        let p = self.cfg().projection_intermediate_size;
        let h = self.lin.m_proj.apply(x, None, Par::Pool);
        emit(taps, || "merger.proj".into(), h.view());
        let mut h = norm::layer_norm(h.view(), w.norm_w.view(), w.norm_b.view(), 1e-5);
        emit(taps, || "merger.post_projection_norm".into(), h.view());
        let cols = h.ncols();
        let hs = h.as_slice_mut().expect("a fresh array is contiguous");
        team::for_each_chunk_mut(hs, cols, |_, row| F::gelu_slice(row));
        emit(taps, || "merger.act1".into(), h.view());
        let gu = self.lin.m_gate_up.apply(h.view(), None, Par::Pool); // [G, 2P]
        emit(taps, || "merger.gate_proj".into(), gu.slice(s![.., ..p]));
        emit(taps, || "merger.up_proj".into(), gu.slice(s![.., p..]));
        let m = swiglu_rows(gu.view(), F::from_f64(self.cfg().swiglu_limit));
        let out = self.lin.m_down.apply(m.view(), None, Par::Pool);
        emit(taps, || "merger.down_proj".into(), out.view());
        emit(taps, || "merger".into(), out.view());
        out
    }

    /// The whole forward in `F` (inputs validated by the caller).
    fn forward_f(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        taps: Taps<'_, '_>,
    ) -> Array2<F> {
        let cfg = self.cfg();
        let total = cfg.depth + 2;
        let px = to_real::<F>(pixel_values);
        let mut x = self.patch_embed_f(px.view());
        drop(px);
        emit(taps, || "patch_embed".into(), x.view());
        let (cos, sin) = self.rope_f(grid_thw);
        emit(taps, || "rotary_pos_emb.cos".into(), cos.view());
        emit(taps, || "rotary_pos_emb.sin".into(), sin.view());
        progress(taps, 1, total);
        let cu = geometry::cu_seqlens(grid_thw);
        let mut scratch = Scratch::default();
        for i in 0..cfg.depth {
            let next =
                self.block_scratch(i, x.view(), cos.view(), sin.view(), &cu, taps, &mut scratch);
            // the old input's buffer becomes the next block's output buffer
            let (old, _) = std::mem::replace(&mut x, next).into_raw_vec_and_offset();
            scratch.out = old;
            progress(taps, i + 2, total);
        }
        let x = self.post_norm_f(x.view());
        emit(taps, || "post_layernorm".into(), x.view());
        let x = self.downsample_f(x.view());
        emit(taps, || "downsample".into(), x.view());
        let out = self.merger_f(x.view(), taps);
        progress(taps, total, total);
        out
    }
}

impl<F: Real> Tower for CpuTower<F> {
    fn config(&self) -> &VisionConfig {
        self.cfg()
    }

    fn describe(&self) -> String {
        let isa = crate::kernels::isa::isa();
        if self.bf16 {
            let attn = if crate::kernels::amx_attention::enabled() {
                ", amx attention"
            } else {
                ""
            };
            format!("reference bf16 ({}, {isa}{attn})", self.kernel())
        } else {
            format!("reference {} ({}, {isa})", F::NAME, self.kernel())
        }
    }

    fn patch_embed(&self, pixel_values: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        check_cols("pixel_values", pixel_values.dim(), self.cfg().patch_dim())?;
        Ok(to_f32(
            self.patch_embed_f(to_real::<F>(pixel_values).view()),
        ))
    }

    fn rope(&self, grid_thw: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError> {
        geometry::validate_grids(self.cfg(), grid_thw)?;
        let (c, s) = self.rope_f(grid_thw);
        Ok((to_f32(c), to_f32(s)))
    }

    fn block(
        &self,
        index: usize,
        hidden: ArrayView2<f32>,
        cos: ArrayView2<f32>,
        sin: ArrayView2<f32>,
        cu_seqlens: &[usize],
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = self.cfg();
        if index >= cfg.depth {
            return Err(InputError::Block {
                index,
                depth: cfg.depth,
            }
            .into());
        }
        let n = hidden.nrows();
        check_cols("block hidden states", hidden.dim(), cfg.hidden_size)?;
        check_shape("rope cos", cos.dim(), (n, cfg.head_dim()))?;
        check_shape("rope sin", sin.dim(), (n, cfg.head_dim()))?;
        geometry::validate_cu_seqlens(cu_seqlens, n)?;
        let (x, c, s) = (to_real::<F>(hidden), to_real::<F>(cos), to_real::<F>(sin));
        Ok(to_f32(self.block_f(
            index,
            x.view(),
            c.view(),
            s.view(),
            cu_seqlens,
            &mut taps,
        )))
    }

    fn post_norm(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        check_cols("post_layernorm input", hidden.dim(), self.cfg().hidden_size)?;
        Ok(to_f32(self.post_norm_f(to_real::<F>(hidden).view())))
    }

    fn downsample(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        geometry::check_downsample_input(self.cfg(), hidden.dim())?;
        Ok(to_f32(self.downsample_f(to_real::<F>(hidden).view())))
    }

    fn merger(
        &self,
        x: ArrayView2<f32>,
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        check_cols("merger input", x.dim(), self.cfg().out_hidden_size)?;
        Ok(to_f32(self.merger_f(to_real::<F>(x).view(), &mut taps)))
    }

    fn forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = self.cfg();
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        // the pool's threads spin between the forward's loops instead of sleeping (team.rs)
        let out = team::with_team(|| self.forward_f(pixel_values, grid_thw, &mut taps));
        Ok(to_f32(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::Isa;

    #[test]
    fn bf16_without_bf16_arithmetic_is_warned_naming_the_level() {
        for isa in [Isa::Generic, Isa::Avx2, Isa::Avx512] {
            let w = bf16_warning(isa, false).expect("a warning below avx512-bf16");
            assert!(
                w.contains(&format!("instruction set {}", isa.name())),
                "{w}"
            );
            assert!(w.contains("no AVX512-BF16, no AMX"), "{w}");
        }
        assert_eq!(bf16_warning(Isa::Avx512Bf16, true), None);
        let slow = bf16_warning(Isa::Avx512Bf16, false).expect("a slow bf16 unit is warned");
        assert!(slow.contains("AVX512-BF16 kernel is not used"), "{slow}");
        assert_eq!(bf16_warning(Isa::Amx, false), None);
        assert_eq!(bf16_warning(Isa::Amx, true), None);
    }

    #[test]
    fn half_inputs_default_to_the_first_blocks() {
        let (h, w) = parse_half_inputs(None);
        assert!(w.is_empty());
        assert_eq!(h.blocks, HALF_INPUT_BLOCKS);
        assert!(h.on(0, "qkv") && h.on(3, "down") && !h.on(4, "qkv"));
        let (h, _) = parse_half_inputs(Some("none"));
        assert!(!h.on(0, "qkv"));
        let (h, _) = parse_half_inputs(Some("all"));
        assert!(h.on(23, "proj") && h.on(0, "gate_up"));
        let (h, _) = parse_half_inputs(Some("first:2"));
        assert!(h.on(1, "proj") && !h.on(2, "proj"));
        let (h, _) = parse_half_inputs(Some(" gate_up , down"));
        assert!(h.on(20, "down") && h.on(0, "gate_up") && !h.on(0, "qkv"));
        let (h, w) = parse_half_inputs(Some("gate_up,mlp"));
        assert!(h.on(0, "gate_up"));
        assert!(w.len() == 1 && w[0].contains("`mlp`"), "{w:?}");
        let (h, w) = parse_half_inputs(Some("first:x"));
        assert_eq!(h.blocks, HALF_INPUT_BLOCKS);
        assert!(w.len() == 1 && w[0].contains("first:"), "{w:?}");
    }

    #[test]
    fn the_bf16_tower_carries_the_warning_exactly_when_the_cpu_lacks_bf16() {
        let cfg = crate::synth::Preset::Tiny.config();
        let isa = crate::kernels::isa::isa();
        let lacks = isa < Isa::Avx512Bf16
            || (isa == Isa::Avx512Bf16 && !crate::kernels::isa::dpbf16_preferred());
        let tw = TowerWeights::<f32>::from_fn(&cfg, |_, v| v.fill(0.5)).expect("tiny weights");
        let f32_tower = CpuTower::new(tw.clone());
        assert!(f32_tower.warnings().iter().all(|w| !w.contains("bf16")));
        let bf16_tower = CpuTower::new_bf16(tw);
        let warned = bf16_tower
            .warnings()
            .iter()
            .any(|w| w.contains("without bf16") || w.contains("kernel is not used"));
        assert_eq!(warned, lacks, "{:?}", bf16_tower.warnings());
        // describe() names the instruction set the kernels use
        assert!(
            bf16_tower
                .describe()
                .contains(crate::kernels::isa::isa().name())
        );
    }
}
