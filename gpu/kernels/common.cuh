// Shared helpers, prepended to every kernel file. The host defines before this:
//   ACT_BF16  1: activations fed to GEMMs are bf16 (raw bits), 0: f32
//   HD        the head dimension (hidden_size / num_heads)
// No CUDA headers are included: bf16 is handled as raw 16-bit words, so the kernels compile with
// a bare NVRTC (no include paths).

#define NEG_INF (__int_as_float(0xff800000))

typedef unsigned short bf16_t;

__device__ __forceinline__ float bf2f(bf16_t v) { return __uint_as_float(((unsigned)v) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
__device__ __forceinline__ bf16_t f2bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// IEEE half (raw bits), round to nearest even: the attention inputs where their range is proven.
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(f));
    return r;
}

// IEEE half (raw bits) -> f32.
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
}

// Four IEEE halves (raw bits, two to a word, the first in the low half) -> f32.
__device__ __forceinline__ float4 half4_of(unsigned a, unsigned b) {
    return make_float4(h2f(a & 0xffffu), h2f(a >> 16), h2f(b & 0xffffu), h2f(b >> 16));
}

// Two f32 -> one bf16x2 or f16x2 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned pack_f16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#if ACT_BF16
typedef bf16_t act_t;
__device__ __forceinline__ float act_ld(const act_t* p, long long i) { return bf2f(p[i]); }
__device__ __forceinline__ void act_st(act_t* p, long long i, float v) { p[i] = f2bf(v); }
// Four consecutive values in one 8-byte store (i a multiple of 4).
__device__ __forceinline__ void act_st4(act_t* p, long long i, float4 v) {
    uint2 w;
    w.x = (unsigned)f2bf(v.x) | ((unsigned)f2bf(v.y) << 16);
    w.y = (unsigned)f2bf(v.z) | ((unsigned)f2bf(v.w) << 16);
    *(uint2*)(p + i) = w;
}
#else
typedef float act_t;
__device__ __forceinline__ float act_ld(const act_t* p, long long i) { return p[i]; }
__device__ __forceinline__ void act_st(act_t* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void act_st4(act_t* p, long long i, float4 v) { *(float4*)(p + i) = v; }
#endif

// act_st / act_st4, or IEEE half when f16 != 0 (bf16 builds only: the host sets f16 where the
// weights prove the range; an f32 build ignores it).
__device__ __forceinline__ void act_st_h(act_t* p, long long i, float v, int f16) {
#if ACT_BF16
    if (f16) {
        p[i] = f2h(v);
        return;
    }
#endif
    act_st(p, i, v);
}
__device__ __forceinline__ void act_st4_h(act_t* p, long long i, float4 v, int f16) {
#if ACT_BF16
    if (f16) {
        *(uint2*)(p + i) = make_uint2(pack_f16(v.x, v.y), pack_f16(v.z, v.w));
        return;
    }
#endif
    act_st4(p, i, v);
}

// Element i of a GEMM output: f32, or IEEE half (raw bits) when f16 != 0.
__device__ __forceinline__ float out_ld(const void* p, long long i, int f16) {
    return f16 ? h2f(((const unsigned short*)p)[i]) : ((const float*)p)[i];
}
// Elements i..i+3 (i a multiple of 4).
__device__ __forceinline__ float4 out_ld4(const void* p, long long i, int f16) {
    if (f16) {
        const uint2 a = *(const uint2*)((const unsigned short*)p + i);
        return half4_of(a.x, a.y);
    }
    return *(const float4*)((const float*)p + i);
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024). Every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* scratch /* >= 32 floats */) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    float t = lane < nw ? scratch[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
