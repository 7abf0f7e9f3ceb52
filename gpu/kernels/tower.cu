// Element-wise and row kernels of the tower. Math in f32; GEMM outputs are f32, GEMM inputs
// act_t (common.cuh); in bf16 builds, blocks whose weights prove the range run their qkv and MLP
// GEMMs in IEEE half instead (inputs and outputs: the `f16` / `in_f16` flags). Launch shapes are set by the host (src/tower.rs).

// Row kernels: one warp per row, ROW_WARPS rows a block; lane l owns columns l, l+32, ...
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
    const long long row = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
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

// h += b (when b is not null), then x += h. h keeps the branch output (a tap), x the residual.
extern "C" __global__ void bias_residual(float* __restrict__ h, const float* __restrict__ b,
                                         float* __restrict__ x, long long rows, int cols) {
    long long n = rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = h[i];
        if (b) {
            v += b[i % cols];
            h[i] = v;
        }
        x[i] += v;
    }
}

// bias_residual then rms_norm in one pass over the row: h += b (b nullable; the sum is written
// back to h only when keep_h, i.e. when h is a wanted tap), x += h, y = w * (x * rsqrt(mean(x^2)
// + eps)). One warp per row (as rms_norm, same summation order), the row held in registers:
// cols <= 32 * RES_MAXV.
#define RES_MAXV 64
extern "C" __global__ void __launch_bounds__(ROW_WARPS * 32)
bias_residual_rms(float* __restrict__ h, const float* __restrict__ b, float* __restrict__ x,
                  const float* __restrict__ w, act_t* __restrict__ y, long long rows, int cols, int keep_h,
                  float eps, int f16) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const long long base = row * cols;
    float s = 0.0f;
    if (ROW_VEC(cols)) {
        float4 xv4[RES_MAXV / 4];
        float4* h4 = (float4*)(h + base);
        float4* x4 = (float4*)(x + base);
        const float4* b4 = (const float4*)b;
        const int n4 = cols >> 2;
#pragma unroll
        for (int i = 0; i < RES_MAXV / 4; ++i) {
            const int c = lane + 32 * i;
            xv4[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (c < n4) {
                float4 v = h4[c];
                if (b) {
                    const float4 bb = b4[c];
                    v.x += bb.x;
                    v.y += bb.y;
                    v.z += bb.z;
                    v.w += bb.w;
                    if (keep_h) h4[c] = v;
                }
                float4 xn = x4[c];
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
        for (int i = 0; i < RES_MAXV / 4; ++i) {
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
            float v = h[base + c];
            if (b) {
                v += b[c];
                if (keep_h) h[base + c] = v;
            }
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

// Grid: x over column groups (4 columns a thread when W % 4 == 0, else 1), y strides over rows:
// no 64-bit division per element, 16-byte loads on the vector path.
extern "C" __global__ void swiglu(const void* __restrict__ gu, const float* __restrict__ b,
                                  act_t* __restrict__ out, long long rows, int width, float limit,
                                  int in_f16, int f16) {
    const bool vec = (width & 3) == 0;
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * (vec ? 4 : 1);
    if (j >= width) return;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const long long gr = r * 2 * width;
        if (vec) {
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
// null when already added); qkv is f32, or IEEE half when in_f16. Writes q, k, v head-major [heads, n, HD] as act_t, or as IEEE half
// when f16 != 0 (bf16 builds; the host sets it only where the weights bound the range); q_tap / k_tap
// (nullable) get the normalised q, k before the rope, token-major [n, heads*HD].
// One warp per (token, head) (lane l owns dims l, l+32, ...: coalesced rows), 4 warps a block,
// grid-stride; the normalised head goes through shared memory for the rope's partner dims.
#define QKR_WARPS 4
extern "C" __global__ void __launch_bounds__(QKR_WARPS * 32)
qk_norm_rope(const void* __restrict__ qkv, const float* __restrict__ bias, const float* __restrict__ qw,
             const float* __restrict__ kw, const float* __restrict__ cosv, const float* __restrict__ sinv,
             act_t* __restrict__ q, act_t* __restrict__ k, act_t* __restrict__ v,
             float* __restrict__ q_tap, float* __restrict__ k_tap, int n, int heads, float eps, int f16,
             int in_f16) {
    __shared__ float sh[QKR_WARPS][HD];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int d_model = heads * HD;
    float* buf = sh[warp];
    const long long items = (long long)n * heads;
    for (long long idx = (long long)blockIdx.x * QKR_WARPS + warp; idx < items;
         idx += (long long)gridDim.x * QKR_WARPS) {
        const int h = (int)(idx % heads);
        const long long t = idx / heads;
        const long long row = t * 3 * d_model;
        const float* c = cosv + t * HD;
        const float* s = sinv + t * HD;
        const long long out_base = ((long long)h * n + t) * HD;
#if HD == 64
        // Lane l owns dims l and l + 32, which are each other's rotate_half partners: no shared
        // memory, and every load of the item (q, k, v, their biases, cos, sin) is issued before
        // the first reduction.
        float x[3][2], cs[2], sn[2];
#pragma unroll
        for (int part = 0; part < 3; ++part)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int col = part * d_model + h * HD + lane + 32 * i;
                x[part][i] = out_ld(qkv, row + col, in_f16) + (bias ? bias[col] : 0.0f);
            }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            cs[i] = c[lane + 32 * i];
            sn[i] = s[lane + 32 * i];
        }
#pragma unroll
        for (int part = 0; part < 2; ++part) {
            float ss = 0.0f;
            ss += x[part][0] * x[part][0];
            ss += x[part][1] * x[part][1];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float r = 1.0f / sqrtf(ss / (float)HD + eps);
            const float* w = part == 0 ? qw : kw;
            const float y0 = w[lane] * (x[part][0] * r), y1 = w[lane + 32] * (x[part][1] * r);
            float* tap = part == 0 ? q_tap : k_tap;
            if (tap) {
                tap[t * d_model + h * HD + lane] = y0;
                tap[t * d_model + h * HD + lane + 32] = y1;
            }
            act_t* dst = (part == 0 ? q : k) + out_base;
            act_st_h(dst, lane, y0 * cs[0] - y1 * sn[0], f16);
            act_st_h(dst, lane + 32, y1 * cs[1] + y0 * sn[1], f16);
        }
        act_st_h(v + out_base, lane, x[2][0], f16);
        act_st_h(v + out_base, lane + 32, x[2][1], f16);
        continue;
#endif
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
}
