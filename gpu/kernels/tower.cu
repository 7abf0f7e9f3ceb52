// Element-wise and row kernels of the tower. Math in f32; GEMM outputs are f32, GEMM inputs
// act_t (common.cuh). Launch shapes are set by the host (src/kernels.rs).

// y[r, :] = w * (x * rsqrt(mean(x^2) + eps)); one block (256 threads) per row.
extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    act_t* __restrict__ y, int cols, float eps) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    const float* xr = x + row * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = xr[c];
        s += v * v;
    }
    s = block_sum(s, scratch);
    float r = 1.0f / sqrtf(s / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) act_st(y, row * cols + c, w[c] * (xr[c] * r));
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

// f32 -> act_t
extern "C" __global__ void cast_act(const float* __restrict__ x, act_t* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        act_st(y, i, x[i]);
}

// The clamped SwiGLU over a fused [rows, 2W] gate|up product (bias b [2W] or null):
// out = silu(min(g, L)) * clamp(u, -L, L). NaN propagates as in torch.
extern "C" __global__ void swiglu(const float* __restrict__ gu, const float* __restrict__ b,
                                  act_t* __restrict__ out, long long rows, int width, float limit) {
    long long n = rows * width;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long r = i / width;
        int j = (int)(i - r * width);
        float g = gu[r * 2 * width + j];
        float u = gu[r * 2 * width + width + j];
        if (b) {
            g += b[j];
            u += b[width + j];
        }
        g = g > limit ? limit : g;
        u = u > limit ? limit : (u < -limit ? -limit : u);
        float s = g / (1.0f + expf(-g));
        act_st(out, i, s * u);
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
// pairs d and d + HD/2), from the fused qkv [n, 3*heads*HD] (bias already added). Writes q, k, v
// head-major [heads, n, HD] as act_t; q_tap / k_tap (nullable) get the normalised q, k before
// the rope, token-major [n, heads*HD]. One thread per (token, head).
extern "C" __global__ void qk_norm_rope(const float* __restrict__ qkv, const float* __restrict__ qw,
                                        const float* __restrict__ kw, const float* __restrict__ cosv,
                                        const float* __restrict__ sinv, act_t* __restrict__ q,
                                        act_t* __restrict__ k, act_t* __restrict__ v,
                                        float* __restrict__ q_tap, float* __restrict__ k_tap, int n,
                                        int heads, float eps) {
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= (long long)n * heads) return;
    int h = (int)(idx % heads);
    long long t = idx / heads;
    int d_model = heads * HD;
    const float* row = qkv + t * 3 * d_model;
    const float* c = cosv + t * HD;
    const float* s = sinv + t * HD;
    long long out_base = ((long long)h * n + t) * HD;
    float buf[HD];
#pragma unroll
    for (int part = 0; part < 2; ++part) {
        const float* src = row + part * d_model + h * HD;
        const float* w = part == 0 ? qw : kw;
        float ss = 0.0f;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
            float x = src[d];
            buf[d] = x;
            ss += x * x;
        }
        float r = 1.0f / sqrtf(ss / (float)HD + eps);
        float* tap = part == 0 ? q_tap : k_tap;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
            buf[d] = w[d] * (buf[d] * r);
            if (tap) tap[t * d_model + h * HD + d] = buf[d];
        }
        act_t* dst = (part == 0 ? q : k) + out_base;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
            float rot = d < HD / 2 ? -buf[d + HD / 2] : buf[d - HD / 2];
            act_st(dst, d, buf[d] * c[d] + rot * s[d]);
        }
    }
    const float* src = row + 2 * d_model + h * HD;
#pragma unroll
    for (int d = 0; d < HD; ++d) act_st(v + out_base, d, src[d]);
}
