// Element-wise and row kernels of the tower. Math in f32; GEMM outputs are f32, GEMM inputs
// act_t (common.cuh); in bf16 builds, blocks whose weights prove the range run their qkv and MLP
// GEMMs in IEEE half instead (inputs and outputs: the `f16` / `in_f16` flags). Launch shapes are set by the host (src/tower.rs).

// Row kernels: one warp per row, up to ROW_WARPS rows a block (one per warp of the launch: few
// rows go one a block, over more SMs); lane l owns columns l, l+32, ...
// (coalesced) and sums its squares in that order, then a butterfly over the warp: no block
// barriers. When cols is a multiple of 128 (the model's 1024), lane l owns the 16-byte chunks
// l, l+32, ... instead (columns 4l..4l+3, then 128 further on) and sums x, y, z, w of each in
// turn. rms_norm and bias_residual_rms use the same order, so the fused and the separate paths
// give the same bits.
#define ROW_WARPS 8
#define ROW_VEC(cols) (((cols) & 127) == 0)

__device__ __forceinline__ float sq4(float s, float4 v) {
    s += v.x * v.x;
    s += v.y * v.y;
    s += v.z * v.z;
    s += v.w * v.w;
    return s;
}
__device__ __forceinline__ float4 scale4(float4 w, float4 x, float r) {
    return make_float4(w.x * (x.x * r), w.y * (x.y * r), w.z * (x.z * r), w.w * (x.w * r));
}

// y[r, :] = w * (x * rsqrt(mean(x^2) + eps)), any cols (x is read twice; the second read hits cache).
extern "C" __global__ void __launch_bounds__(ROW_WARPS * 32)
rms_norm(const float* __restrict__ x, const float* __restrict__ w, act_t* __restrict__ y, long long rows,
         int cols, float eps, int f16) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float s = 0.0f;
    if (ROW_VEC(cols)) {
        const float4* x4 = (const float4*)xr;
        const int n4 = cols >> 2;
        for (int c = lane; c < n4; c += 32) s = sq4(s, x4[c]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float r = 1.0f / sqrtf(s / (float)cols + eps);
        for (int c = lane; c < n4; c += 32)
            act_st4_h(y, row * cols + 4 * c, scale4(((const float4*)w)[c], x4[c], r), f16);
        return;
    }
    for (int c = lane; c < cols; c += 32) {
        const float v = xr[c];
        s += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float r = 1.0f / sqrtf(s / (float)cols + eps);
    for (int c = lane; c < cols; c += 32) act_st_h(y, row * cols + c, w[c] * (xr[c] * r), f16);
}

// y[r, c] += b[c]
extern "C" __global__ void add_bias(float* __restrict__ y, const float* __restrict__ b, long long rows,
                                    int cols) {
    long long n = rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] += b[i % cols];
}

// v = h + b (h f32, or IEEE half when h16; b nullable), x += v. When keep_h (a wanted tap), v
// goes back into h (f32 h) or into h_out (f32, when h is half). Every pointer is restrict (v is
// written through h itself, never through h_out, when h is f32): the loads are not held back
// behind the stores.
extern "C" __global__ void bias_residual(void* __restrict__ h, const float* __restrict__ b,
                                         float* __restrict__ x, float* __restrict__ h_out,
                                         long long rows, int cols, int keep_h, int h16) {
    long long n = rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = out_ld(h, i, h16);
        if (b) v += b[i % cols];
        if (keep_h) (h16 ? h_out : (float*)h)[i] = v;
        x[i] += v;
    }
}

// bias_residual then rms_norm in one pass over the row: v = h + b (h f32, or IEEE half when
// h16; b nullable), kept as bias_residual does when keep_h, x += v, y = w * (x * rsqrt(mean(x^2)
// + eps)). One warp per row (as rms_norm, same summation order), the row held in registers:
// cols <= 32 * RES_MAXV.
#define RES_MAXV 64
// The body, with the type of h fixed (a branch on it per element held the loads back) and NV, the
// float4 slots a lane holds on the vector path (cols <= 128 NV; the hidden size 1024 gets exactly
// 8: no idle slots holding registers).
template <bool H16, int NV>
__device__ __forceinline__ void bias_residual_rms_body(void* __restrict__ h, const float* __restrict__ b,
                                                       float* __restrict__ x, const float* __restrict__ w,
                                                       act_t* __restrict__ y, long long rows, int cols,
                                                       float* __restrict__ h_out, int keep_h, float eps,
                                                       int f16) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const long long base = row * cols;
    float* keep = keep_h ? (H16 ? h_out : (float*)h) : nullptr;
    float s = 0.0f;
    if (ROW_VEC(cols)) {
        // Every load of the row first (h + b, x), then the stores: the warp issues all of its
        // loads before it waits on one.
        float4 hv4[NV], xv4[NV];
        float4* x4 = (float4*)(x + base);
        const float4* b4 = (const float4*)b;
        const int n4 = cols >> 2;
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int c = lane + 32 * i;
            hv4[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            xv4[i] = hv4[i];
            if (c < n4) {
                hv4[i] = out_ld4(h, base + 4 * c, H16);
                xv4[i] = x4[c];
            }
        }
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int c = lane + 32 * i;
            if (c < n4) {
                float4 v = hv4[i];
                if (b) {
                    const float4 bb = b4[c];
                    v.x += bb.x;
                    v.y += bb.y;
                    v.z += bb.z;
                    v.w += bb.w;
                }
                if (keep) ((float4*)(keep + base))[c] = v;
                float4 xn = xv4[i];
                xn.x += v.x;
                xn.y += v.y;
                xn.z += v.z;
                xn.w += v.w;
                x4[c] = xn;
                xv4[i] = xn;
                s = sq4(s, xn);
            }
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const float r = 1.0f / sqrtf(s / (float)cols + eps);
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int c = lane + 32 * i;
            if (c < n4) act_st4_h(y, base + 4 * c, scale4(((const float4*)w)[c], xv4[i], r), f16);
        }
        return;
    }
    float xv[RES_MAXV];
#pragma unroll
    for (int i = 0; i < RES_MAXV; ++i) {
        const int c = lane + 32 * i;
        xv[i] = 0.0f;
        if (c < cols) {
            float v = out_ld(h, base + c, H16);
            if (b) v += b[c];
            if (keep) keep[base + c] = v;
            const float xn = x[base + c] + v;
            x[base + c] = xn;
            xv[i] = xn;
            s += xn * xn;
        }
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float r = 1.0f / sqrtf(s / (float)cols + eps);
#pragma unroll
    for (int i = 0; i < RES_MAXV; ++i) {
        const int c = lane + 32 * i;
        if (c < cols) act_st_h(y, base + c, w[c] * (xv[i] * r), f16);
    }
}
// Two entry points: a kernel's registers are those of its largest path, so the hidden size of
// the model (1024) gets its own, holding 8 float4 a lane instead of RES_MAXV / 4.
#define BRR_ARGS                                                                                   \
    void *__restrict__ h, const float *__restrict__ b, float *__restrict__ x,                     \
        const float *__restrict__ w, act_t *__restrict__ y, long long rows, int cols,             \
        float *__restrict__ h_out, int keep_h, float eps, int f16, int h16
extern "C" __global__ void __launch_bounds__(ROW_WARPS * 32) bias_residual_rms(BRR_ARGS) {
    if (h16)
        bias_residual_rms_body<true, RES_MAXV / 4>(h, b, x, w, y, rows, cols, h_out, keep_h, eps, f16);
    else
        bias_residual_rms_body<false, RES_MAXV / 4>(h, b, x, w, y, rows, cols, h_out, keep_h, eps, f16);
}
// cols == 1024 only.
extern "C" __global__ void __launch_bounds__(ROW_WARPS * 32) bias_residual_rms_1024(BRR_ARGS) {
    if (h16)
        bias_residual_rms_body<true, 8>(h, b, x, w, y, rows, cols, h_out, keep_h, eps, f16);
    else
        bias_residual_rms_body<false, 8>(h, b, x, w, y, rows, cols, h_out, keep_h, eps, f16);
}

// f32 -> act_t
extern "C" __global__ void cast_act(const float* __restrict__ x, act_t* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        act_st(y, i, x[i]);
}

// IEEE half (raw bits) -> bf16: cuDNN's attention output when its inputs were half.
// Four elements a thread (8-byte loads and stores) while they last, then one.
extern "C" __global__ void half_to_bf16(const unsigned short* __restrict__ x, bf16_t* __restrict__ y,
                                        long long n) {
    const long long n4 = n >> 2;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += stride) {
        const uint2 a = ((const uint2*)x)[i];
        uint2 b;
        b.x = (unsigned)f2bf(h2f(a.x & 0xffffu)) | ((unsigned)f2bf(h2f(a.x >> 16)) << 16);
        b.y = (unsigned)f2bf(h2f(a.y & 0xffffu)) | ((unsigned)f2bf(h2f(a.y >> 16)) << 16);
        ((uint2*)y)[i] = b;
    }
    for (long long i = 4 * n4 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = f2bf(h2f(x[i]));
}

// In place (raw bits), for an attention output whose type differs from the projection's input:
// bf16 -> IEEE half, and IEEE half -> bf16.
extern "C" __global__ void bf16_to_half(unsigned short* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        x[i] = f2h(bf2f(x[i]));
}
extern "C" __global__ void half_to_bf16_inplace(unsigned short* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        x[i] = f2bf(h2f(x[i]));
}

// The clamped SwiGLU over a fused [rows, 2W] gate|up product (f32, or IEEE half when in_f16;
// bias b [2W] f32 or null): out = silu(min(g, L)) * clamp(u, -L, L), stored as act_t or as half
// when f16. NaN propagates as in torch.
__device__ __forceinline__ float swiglu1(float g, float u, float limit) {
    g = g > limit ? limit : g;
    u = u > limit ? limit : (u < -limit ? -limit : u);
    return g / (1.0f + expf(-g)) * u;
}

// Grid: x over column groups (8 columns a thread when half in and out and W % 8 == 0, else 4
// when W % 4 == 0, else 1: SWIGLU_PER, which the host mirrors), y strides over rows: no 64-bit
// division per element, 16-byte loads on the vector paths.
#define SWIGLU_PER(width, in_f16, f16) \
    ((ACT_BF16 && (in_f16) && (f16) && ((width) & 7) == 0) ? 8 : (((width) & 3) == 0 ? 4 : 1))
extern "C" __global__ void swiglu(const void* __restrict__ gu, const float* __restrict__ b,
                                  act_t* __restrict__ out, long long rows, int width, float limit,
                                  int in_f16, int f16) {
    const int per = SWIGLU_PER(width, in_f16, f16);
    const bool vec = per == 4;
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * per;
    if (j >= width) return;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const long long gr = r * 2 * width;
        if (per == 8) {
            const unsigned short* p = (const unsigned short*)gu;
            const uint4 ga = *(const uint4*)(p + gr + j), ua = *(const uint4*)(p + gr + width + j);
            float4 g[2] = {half4_of(ga.x, ga.y), half4_of(ga.z, ga.w)};
            float4 u[2] = {half4_of(ua.x, ua.y), half4_of(ua.z, ua.w)};
            if (b) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float4 bg = *(const float4*)(b + j + 4 * i);
                    const float4 bu = *(const float4*)(b + width + j + 4 * i);
                    g[i].x += bg.x; g[i].y += bg.y; g[i].z += bg.z; g[i].w += bg.w;
                    u[i].x += bu.x; u[i].y += bu.y; u[i].z += bu.z; u[i].w += bu.w;
                }
            }
            uint4 o;
            o.x = pack_f16(swiglu1(g[0].x, u[0].x, limit), swiglu1(g[0].y, u[0].y, limit));
            o.y = pack_f16(swiglu1(g[0].z, u[0].z, limit), swiglu1(g[0].w, u[0].w, limit));
            o.z = pack_f16(swiglu1(g[1].x, u[1].x, limit), swiglu1(g[1].y, u[1].y, limit));
            o.w = pack_f16(swiglu1(g[1].z, u[1].z, limit), swiglu1(g[1].w, u[1].w, limit));
            *(uint4*)((unsigned short*)out + r * width + j) = o;
        } else if (vec) {
            float4 g = out_ld4(gu, gr + j, in_f16), u = out_ld4(gu, gr + width + j, in_f16);
            if (b) {
                const float4 bg = *(const float4*)(b + j), bu = *(const float4*)(b + width + j);
                g.x += bg.x; g.y += bg.y; g.z += bg.z; g.w += bg.w;
                u.x += bu.x; u.y += bu.y; u.z += bu.z; u.w += bu.w;
            }
            act_st4_h(out, r * width + j,
                      make_float4(swiglu1(g.x, u.x, limit), swiglu1(g.y, u.y, limit),
                                  swiglu1(g.z, u.z, limit), swiglu1(g.w, u.w, limit)),
                      f16);
        } else {
            float g = out_ld(gu, gr + j, in_f16), u = out_ld(gu, gr + width + j, in_f16);
            if (b) {
                g += b[j];
                u += b[width + j];
            }
            act_st_h(out, r * width + j, swiglu1(g, u, limit), f16);
        }
    }
}

// LayerNorm (biased variance, eps) then exact-erf GELU; one block (256 threads) per row.
// ln (nullable) receives the LayerNorm output (a tap), y the GELU output.
extern "C" __global__ void layer_norm_gelu(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ b, float* __restrict__ ln,
                                           act_t* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    const float* xr = x + row * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    float mean = block_sum(s, scratch) / (float)cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = xr[c] - mean;
        q += d * d;
    }
    float var = block_sum(q, scratch) / (float)cols;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = (xr[c] - mean) * rstd * w[c] + b[c];
        if (ln) ln[row * cols + c] = v;
        act_st(y, row * cols + c, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

// Per-head RMSNorm of q and k (weights qw, kw [HD]), then the rope (cos/sin [n, HD], rotate_half
// pairs d and d + HD/2), from the fused qkv [n, 3*heads*HD] plus its bias (bias [3*heads*HD] or
// null when already added); qkv is f32, or IEEE half when in_f16. Writes q, k, v head-major [heads, stride, HD]
// (stride >= n tokens per head: cuDNN's plans then hold for any n up to it) as act_t, or as IEEE half
// when f16 != 0 (bf16 builds; the host sets it only where the weights bound the range); q_tap / k_tap
// (nullable) get the normalised q, k before the rope, token-major [n, heads*HD].
// HD == 64: eight lanes per (token, head), four items a warp (lane l of a group owns dims 4l..4l+3
// and their rotate_half partners 32+4l..32+4l+3: 8-byte half / 16-byte f32 loads, no shared
// memory), 4 warps a block, grid-stride. Other head dims: one warp per item (lane l owns dims l,
// l+32, ...), the normalised head through shared memory for the rope's partner dims.
#define QKR_WARPS 4
extern "C" __global__ void __launch_bounds__(QKR_WARPS * 32)
qk_norm_rope(const void* __restrict__ qkv, const float* __restrict__ bias, const float* __restrict__ qw,
             const float* __restrict__ kw, const float* __restrict__ cosv, const float* __restrict__ sinv,
             act_t* __restrict__ q, act_t* __restrict__ k, act_t* __restrict__ v,
             float* __restrict__ q_tap, float* __restrict__ k_tap, int n, int heads, float eps, int f16,
             int in_f16, int stride) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int d_model = heads * HD;
    const long long items = (long long)n * heads;
#if HD == 64
    const int g = lane & 7;  // lane within the item's group of eight
    const int d0 = 4 * g;    // dims d0..d0+3 and d0+32..d0+35
    // The loop bound is the same for the whole warp (every lane takes part in the shuffles);
    // lanes past the last item compute on zeros and store nothing.
    const int wpb = blockDim.x >> 5;  // up to QKR_WARPS (fewer for small launches)
    for (long long first = ((long long)blockIdx.x * wpb + warp) * 4; first < items;
         first += (long long)gridDim.x * wpb * 4) {
        const long long idx = first + (lane >> 3);
        const bool live = idx < items;
        const int h = live ? (int)(idx % heads) : 0;
        const long long t = live ? idx / heads : 0;
        const long long row = t * 3 * d_model;
        const long long out_base = ((long long)h * stride + t) * HD;
        float4 x[3][2];
#pragma unroll
        for (int part = 0; part < 3; ++part)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int col = part * d_model + h * HD + d0 + 32 * i;
                float4 val = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (live) {
                    val = out_ld4(qkv, row + col, in_f16);
                    if (bias) {
                        const float4 bb = *(const float4*)(bias + col);
                        val.x += bb.x;
                        val.y += bb.y;
                        val.z += bb.z;
                        val.w += bb.w;
                    }
                }
                x[part][i] = val;
            }
        float4 cs[2], sn[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            cs[i] = live ? *(const float4*)(cosv + t * HD + d0 + 32 * i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            sn[i] = live ? *(const float4*)(sinv + t * HD + d0 + 32 * i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            float ss = sq4(sq4(0.0f, x[part][0]), x[part][1]);
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float r = 1.0f / sqrtf(ss / (float)HD + eps);
            const float* w = part == 0 ? qw : kw;
            const float4 y0 = scale4(*(const float4*)(w + d0), x[part][0], r);
            const float4 y1 = scale4(*(const float4*)(w + d0 + 32), x[part][1], r);
            if (!live) continue;
            float* tap = part == 0 ? q_tap : k_tap;
            if (tap) {
                *(float4*)(tap + t * d_model + h * HD + d0) = y0;
                *(float4*)(tap + t * d_model + h * HD + d0 + 32) = y1;
            }
            act_t* dst = (part == 0 ? q : k) + out_base;
            act_st4_h(dst, d0,
                      make_float4(y0.x * cs[0].x - y1.x * sn[0].x, y0.y * cs[0].y - y1.y * sn[0].y,
                                  y0.z * cs[0].z - y1.z * sn[0].z, y0.w * cs[0].w - y1.w * sn[0].w),
                      f16);
            act_st4_h(dst, d0 + 32,
                      make_float4(y1.x * cs[1].x + y0.x * sn[1].x, y1.y * cs[1].y + y0.y * sn[1].y,
                                  y1.z * cs[1].z + y0.z * sn[1].z, y1.w * cs[1].w + y0.w * sn[1].w),
                      f16);
        }
        if (live) {
            act_st4_h(v + out_base, d0, x[2][0], f16);
            act_st4_h(v + out_base, d0 + 32, x[2][1], f16);
        }
    }
#else
    __shared__ float sh[QKR_WARPS][HD];
    float* buf = sh[warp];
    const int wpb = blockDim.x >> 5;
    for (long long idx = (long long)blockIdx.x * wpb + warp; idx < items;
         idx += (long long)gridDim.x * wpb) {
        const int h = (int)(idx % heads);
        const long long t = idx / heads;
        const long long row = t * 3 * d_model;
        const float* c = cosv + t * HD;
        const float* s = sinv + t * HD;
        const long long out_base = ((long long)h * stride + t) * HD;
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            const int col0 = part * d_model + h * HD;
            const float* w = part == 0 ? qw : kw;
            float ss = 0.0f;
            float xs[(HD + 31) / 32];
#pragma unroll
            for (int i = 0; i < (HD + 31) / 32; ++i) {
                const int d = lane + 32 * i;
                float x = 0.0f;
                if (d < HD) {
                    x = out_ld(qkv, row + col0 + d, in_f16);
                    if (bias) x += bias[col0 + d];
                }
                xs[i] = x;
                ss += x * x;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float r = 1.0f / sqrtf(ss / (float)HD + eps);
            float* tap = part == 0 ? q_tap : k_tap;
#pragma unroll
            for (int i = 0; i < (HD + 31) / 32; ++i) {
                const int d = lane + 32 * i;
                if (d < HD) {
                    const float y = w[d] * (xs[i] * r);
                    xs[i] = y;
                    buf[d] = y;
                    if (tap) tap[t * d_model + h * HD + d] = y;
                }
            }
            __syncwarp();
            act_t* dst = (part == 0 ? q : k) + out_base;
#pragma unroll
            for (int i = 0; i < (HD + 31) / 32; ++i) {
                const int d = lane + 32 * i;
                if (d < HD) {
                    const float rot = d < HD / 2 ? -buf[d + HD / 2] : buf[d - HD / 2];
                    act_st_h(dst, d, xs[i] * c[d] + rot * s[d], f16);
                }
            }
            __syncwarp();  // buf is rewritten by the next part / item
        }
        const int col0 = 2 * d_model + h * HD;
#pragma unroll
        for (int i = 0; i < (HD + 31) / 32; ++i) {
            const int d = lane + 32 * i;
            if (d < HD) {
                float x = out_ld(qkv, row + col0 + d, in_f16);
                if (bias) x += bias[col0 + d];
                act_st_h(v + out_base, d, x, f16);
            }
        }
    }
#endif
}
