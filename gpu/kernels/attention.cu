// Varlen non-causal attention with an online softmax (flash-style): no [n, n] buffer, no sequence
// ceiling. q, k, v are head-major [heads, n, HD] act_t; out is token-major [n, heads*HD] act_t.
// `tiles` lists (segment start, segment end, first query, end query) per query tile of at most
// ATT_BQ queries inside one segment; grid = (tiles, heads), ATT_BQ threads, one query per thread.
// Scores and the softmax run in f32, in base 2 (scale_log2 = head_dim^-0.5 * log2(e)).

#define ATT_BQ 64
#define ATT_BK 32

extern "C" __global__ void __launch_bounds__(ATT_BQ)
attention(const act_t* __restrict__ q, const act_t* __restrict__ k, const act_t* __restrict__ v,
          const int4* __restrict__ tiles, act_t* __restrict__ out, int n, int heads, float scale_log2) {
    __shared__ float ks[ATT_BK][HD];
    __shared__ float vs[ATT_BK][HD];
    __shared__ float ss[ATT_BQ][ATT_BK + 1];  // this thread's scores of the key tile
    const int4 tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int s0 = tile.x, s1 = tile.y;
    const int qi = tile.z + (int)threadIdx.x;
    const bool active = qi < tile.w;
    const long long head_base = (long long)h * n * HD;
    float qr[HD], acc[HD];
#pragma unroll
    for (int d = 0; d < HD; ++d) {
        qr[d] = active ? act_ld(q, head_base + (long long)qi * HD + d) * scale_log2 : 0.0f;
        acc[d] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int kb = s0; kb < s1; kb += ATT_BK) {
        const int cnt = min(ATT_BK, s1 - kb);
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_BK * HD; i += ATT_BQ) {
            const int j = i / HD, d = i - (i / HD) * HD;
            float kv = 0.0f, vv = 0.0f;
            if (j < cnt) {
                const long long off = head_base + (long long)(kb + j) * HD + d;
                kv = act_ld(k, off);
                vv = act_ld(v, off);
            }
            ks[j][d] = kv;
            vs[j][d] = vv;
        }
        __syncthreads();
        float bm = NEG_INF;
#pragma unroll 2
        for (int j = 0; j < cnt; ++j) {
            float a = 0.0f;
#pragma unroll
            for (int d = 0; d < HD; ++d) a = fmaf(qr[d], ks[j][d], a);
            ss[threadIdx.x][j] = a;
            bm = fmaxf(bm, a);
        }
        const float mn = fmaxf(m, bm);  // finite: cnt >= 1
        const float corr = exp2f(m - mn);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] *= corr;
#pragma unroll 2
        for (int j = 0; j < cnt; ++j) {
            const float p = exp2f(ss[threadIdx.x][j] - mn);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; ++d) acc[d] = fmaf(p, vs[j][d], acc[d]);
        }
        m = mn;
    }
    if (active) {
        const float inv = 1.0f / l;
        const long long o = (long long)qi * heads * HD + (long long)h * HD;
#pragma unroll
        for (int d = 0; d < HD; ++d) act_st(out, o + d, acc[d] * inv);
    }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core path (bf16, head_dim 64): the same tiles, 4 warps of 16 queries each, key tiles of
// 64 in shared memory, S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, f32 accumulate),
// the online softmax in f32 registers (FlashAttention-2 layout: P stays in registers).
#if ACT_BF16 && (HD == 64)
#define MMA_BK 64
#define MMA_WARPS 8  // 16 queries each: tiles of 128 queries
#define KPAD 72      // padded row (bf16 elements): conflict-free fragment and ldmatrix loads

// Four 8x8 b16 matrices from shared memory, transposed (rows addressed by lanes 8i..8i+7).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* smem_row) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n" : "=r"(a) : "l"(smem_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Two f32 -> one bf16x2 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^x on the special-function unit (about 2 ulp; -inf -> 0).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)
attention_mma(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k, const bf16_t* __restrict__ v,
              const int4* __restrict__ tiles, bf16_t* __restrict__ out, int n, int heads, float scale_log2) {
    __shared__ __align__(16) bf16_t Ks[MMA_BK][KPAD];
    __shared__ __align__(16) bf16_t Vs[MMA_BK][KPAD];
    const int4 tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int s0 = tile.x, s1 = tile.y, q0 = tile.z, q1 = tile.w;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const long long hb = (long long)h * n * HD;
    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
    const bool ok0 = r0 < q1, ok1 = r1 < q1;

    unsigned qa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const int c = kk * 16 + tq * 2;
        qa[kk][0] = ok0 ? *(const unsigned*)(q + hb + (long long)r0 * HD + c) : 0u;
        qa[kk][1] = ok1 ? *(const unsigned*)(q + hb + (long long)r1 * HD + c) : 0u;
        qa[kk][2] = ok0 ? *(const unsigned*)(q + hb + (long long)r0 * HD + c + 8) : 0u;
        qa[kk][3] = ok1 ? *(const unsigned*)(q + hb + (long long)r1 * HD + c + 8) : 0u;
    }
    float o[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;

    for (int kb = s0; kb < s1; kb += MMA_BK) {
        const int cnt = min(MMA_BK, s1 - kb);
        __syncthreads();
        for (int i = threadIdx.x; i < MMA_BK * 8; i += MMA_WARPS * 32) {
            const int j = i >> 3, c8 = (i & 7) * 8;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = make_uint4(0u, 0u, 0u, 0u);
            if (j < cnt) {
                const long long off = hb + (long long)(kb + j) * HD + c8;
                kv = *(const uint4*)(k + off);
                vv = *(const uint4*)(v + off);
            }
            *(uint4*)&Ks[j][c8] = kv;
            *(uint4*)&Vs[j][c8] = vv;
        }
        __syncthreads();

        float s[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const bf16_t* kr = &Ks[nt * 8 + g][kk * 16 + tq * 2];
                mma16816(s[nt], qa[kk], *(const unsigned*)kr, *(const unsigned*)(kr + 8));
            }
        }
        float mx0 = NEG_INF, mx1 = NEG_INF;
        if (cnt < MMA_BK) {  // the segment's last, partial key tile: mask the missing keys
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const bool ok = nt * 8 + tq * 2 + e < cnt;
                    s[nt][e] = ok ? s[nt][e] : NEG_INF;
                    s[nt][2 + e] = ok ? s[nt][2 + e] : NEG_INF;
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                s[nt][e] *= scale_log2;
                s[nt][2 + e] *= scale_log2;
                mx0 = fmaxf(mx0, s[nt][e]);
                mx1 = fmaxf(mx1, s[nt][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);  // finite: cnt >= 1
        const float c0 = fast_exp2(m0 - mn0), c1 = fast_exp2(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            o[nt][0] *= c0;
            o[nt][1] *= c0;
            o[nt][2] *= c1;
            o[nt][3] *= c1;
        }
        unsigned pa[4][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const float p0 = fast_exp2(s[nt][0] - mn0), p1 = fast_exp2(s[nt][1] - mn0);
            const float p2 = fast_exp2(s[nt][2] - mn1), p3 = fast_exp2(s[nt][3] - mn1);
            l0 += p0 + p1;
            l1 += p2 + p3;
            const int kk = nt >> 1, hi = (nt & 1) * 2;
            pa[kk][hi] = pack_bf16(p0, p1);
            pa[kk][hi + 1] = pack_bf16(p2, p3);
        }
        // O += P V: V row-major [key][dim] in shared memory, B fragments by ldmatrix.trans
        // (matrix i of the x4: keys kk*16 + (i&1)*8.., dims (nt + (i>>1))*8..).
        const int mi = lane >> 3, mr = lane & 7;
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                unsigned b[4];
                ldmatrix_x4_trans(b, &Vs[kk * 16 + (mi & 1) * 8 + mr][(nt + (mi >> 1)) * 8]);
                mma16816(o[nt], pa[kk], b[0], b[1]);
                mma16816(o[nt + 1], pa[kk], b[2], b[3]);
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
    const long long stride = (long long)heads * HD;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
        const int d = h * HD + nt * 8 + tq * 2;
        if (ok0) *(unsigned*)(out + (long long)r0 * stride + d) = pack_bf16(o[nt][0] * i0, o[nt][1] * i0);
        if (ok1) *(unsigned*)(out + (long long)r1 * stride + d) = pack_bf16(o[nt][2] * i1, o[nt][3] * i1);
    }
}
#endif
