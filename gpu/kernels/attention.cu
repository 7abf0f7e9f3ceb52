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
// Tensor-core path (bf16, head_dim 64): query tiles of 128 (the host's tile list), key tiles of 64
// double-buffered in shared memory by cp.async (the next tile loads while this one computes),
// S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, f32 accumulate), the online softmax in
// f32 registers in base 2 (FlashAttention-2 layout: P stays in registers).
#if ACT_BF16 && (HD == 64)
#define MMA_BQ 128
#define MMA_BK 64
#define KPAD 72  // padded row (bf16 elements): conflict-free ldmatrix rows

// Shared-memory address of a generic pointer (for ldmatrix and cp.async).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n" : "=r"(a) : "l"(p));
    return a;
}

// Four 8x8 b16 matrices from shared memory (rows addressed by lanes 8i..8i+7), as stored or
// transposed.
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(smem_row))
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned* r, const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(smem_row))
                 : "memory");
}

// 16 bytes global -> shared without a register round trip; `full == false` writes 16 zero bytes
// (and reads nothing from `src`, which must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(full ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// pack_bf16 / pack_f16 (common.cuh) by type.
template <bool F16>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return F16 ? pack_f16(lo, hi) : pack_bf16(lo, hi);
}

// 2^x on the special-function unit (about 2 ulp; -inf -> 0).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// C += A B, m16n8k16, f32 accumulate; A and B bf16 or (F16) IEEE half.
template <bool F16>
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    if (F16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// WARPS warps of MT m16 query tiles each (WARPS * MT * 16 == MMA_BQ). A warp loads each K and V
// fragment from shared memory once (ldmatrix) and uses it for its MT query tiles: shared-memory
// traffic per MMA falls as 1/MT. The softmax scale is folded into the exponent's FMA.
// F16: q, k, v arrive as IEEE half and P is packed as half (3 more mantissa bits than bf16 for the
// same tensor-core rate), and the output is half too (the projection reads it as half).
template <int WARPS, int MT, bool F16>
__device__ __forceinline__ void attention_mma_body(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                                                   const bf16_t* __restrict__ v, const int4* __restrict__ tiles,
                                                   bf16_t* __restrict__ out, int n, int heads, float scale_log2) {
    static_assert(WARPS * MT * 16 == MMA_BQ, "a block covers one query tile");
    __shared__ __align__(16) bf16_t Ks[2][MMA_BK][KPAD];
    __shared__ __align__(16) bf16_t Vs[2][MMA_BK][KPAD];
    const int4 tile = tiles[blockIdx.x];
    const int h = blockIdx.y;
    const int s0 = tile.x, s1 = tile.y, q0 = tile.z, q1 = tile.w;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, mr = lane & 7;
    const long long hb = (long long)h * n * HD;

    // Key tile `kb` into buffer `st`: 64 rows x 8 chunks of 16 bytes per matrix; rows past the
    // segment end are zero-filled (and masked below).
    auto load = [&](int st, int kb) {
#pragma unroll
        for (int i = threadIdx.x; i < MMA_BK * 8; i += WARPS * 32) {
            const int j = i >> 3, c8 = (i & 7) * 8;
            const bool in = kb + j < s1;
            const long long off = hb + (long long)(in ? kb + j : s0) * HD + c8;
            cp_async16(&Ks[st][j][c8], k + off, in);
            cp_async16(&Vs[st][j][c8], v + off, in);
        }
        cp_async_commit();
    };
    load(0, s0);

    int r0[MT];
    bool ok0[MT], ok1[MT];
    unsigned qa[MT][4][4];
    float o[MT][8][4];
    float m0[MT], m1[MT], l0[MT], l1[MT];  // m in units of scale_log2 * score
#pragma unroll
    for (int t = 0; t < MT; ++t) {
        r0[t] = q0 + (warp * MT + t) * 16 + g;
        ok0[t] = r0[t] < q1;
        ok1[t] = r0[t] + 8 < q1;
        const long long a0 = hb + (long long)r0[t] * HD, a1 = a0 + 8 * HD;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const int c = kk * 16 + tq * 2;
            qa[t][kk][0] = ok0[t] ? *(const unsigned*)(q + a0 + c) : 0u;
            qa[t][kk][1] = ok1[t] ? *(const unsigned*)(q + a1 + c) : 0u;
            qa[t][kk][2] = ok0[t] ? *(const unsigned*)(q + a0 + c + 8) : 0u;
            qa[t][kk][3] = ok1[t] ? *(const unsigned*)(q + a1 + c + 8) : 0u;
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) o[t][nt][0] = o[t][nt][1] = o[t][nt][2] = o[t][nt][3] = 0.0f;
        m0[t] = m1[t] = NEG_INF;
        l0[t] = l1[t] = 0.0f;
    }

    int st = 0;
    for (int kb = s0; kb < s1; kb += MMA_BK) {
        const int cnt = min(MMA_BK, s1 - kb);
        if (kb + MMA_BK < s1) {
            load(st ^ 1, kb + MMA_BK);
        } else {
            cp_async_commit();  // an empty group keeps the wait count uniform
        }
        cp_async_wait1();  // this tile's group is complete (the next one may still be in flight)
        __syncthreads();

        float s[MT][8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int t = 0; t < MT; ++t) s[t][nt][0] = s[t][nt][1] = s[t][nt][2] = s[t][nt][3] = 0.0f;
#pragma unroll
            for (int kp = 0; kp < 2; ++kp) {
                // matrix i of the x4: keys nt*8.., dims kp*32 + i*8..: B fragments of k-steps 2kp, 2kp+1
                unsigned b[4];
                ldmatrix_x4(b, &Ks[st][nt * 8 + mr][kp * 32 + mi * 8]);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    mma16816<F16>(s[t][nt], qa[t][2 * kp], b[0], b[1]);
                    mma16816<F16>(s[t][nt], qa[t][2 * kp + 1], b[2], b[3]);
                }
            }
        }
        unsigned pa[MT][4][4];
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            if (cnt < MMA_BK) {  // the segment's last, partial key tile: mask the missing keys
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const bool ok = nt * 8 + tq * 2 + e < cnt;
                        s[t][nt][e] = ok ? s[t][nt][e] : NEG_INF;
                        s[t][nt][2 + e] = ok ? s[t][nt][2 + e] : NEG_INF;
                    }
                }
            }
            float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                mx0 = fmaxf(mx0, fmaxf(s[t][nt][0], s[t][nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s[t][nt][2], s[t][nt][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            // scale_log2 > 0, so the maximum of the scaled scores is the scaled maximum.
            const float mxs0 = mx0 * scale_log2, mxs1 = mx1 * scale_log2;
            // Lazy rescaling: the reference maximum m (and with it o and l) moves only when some
            // row of the warp grew past it by more than 8 (base 2). Until then p <= 2^8, far
            // inside f32, bf16 and half range, and o / l is the same function of the scores.
            if (__any_sync(0xffffffffu, mxs0 > m0[t] + 8.0f || mxs1 > m1[t] + 8.0f)) {
                const float mn0 = fmaxf(m0[t], mxs0), mn1 = fmaxf(m1[t], mxs1);
                const float c0 = fast_exp2(m0[t] - mn0), c1 = fast_exp2(m1[t] - mn1);
                m0[t] = mn0;
                m1[t] = mn1;
                l0[t] *= c0;
                l1[t] *= c1;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    o[t][nt][0] *= c0;
                    o[t][nt][1] *= c0;
                    o[t][nt][2] *= c1;
                    o[t][nt][3] *= c1;
                }
            }
            const float mn0 = m0[t], mn1 = m1[t];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float p0 = fast_exp2(fmaf(s[t][nt][0], scale_log2, -mn0));
                const float p1 = fast_exp2(fmaf(s[t][nt][1], scale_log2, -mn0));
                const float p2 = fast_exp2(fmaf(s[t][nt][2], scale_log2, -mn1));
                const float p3 = fast_exp2(fmaf(s[t][nt][3], scale_log2, -mn1));
                l0[t] += p0 + p1;
                l1[t] += p2 + p3;
                const int kk = nt >> 1, hi = (nt & 1) * 2;
                pa[t][kk][hi] = pack2<F16>(p0, p1);
                pa[t][kk][hi + 1] = pack2<F16>(p2, p3);
            }
        }
        // O += P V: V row-major [key][dim] in shared memory, B fragments by ldmatrix.trans
        // (matrix i of the x4: keys kk*16 + (i&1)*8.., dims (nt + (i>>1))*8..).
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                unsigned b[4];
                ldmatrix_x4_trans(b, &Vs[st][kk * 16 + (mi & 1) * 8 + mr][(nt + (mi >> 1)) * 8]);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    mma16816<F16>(o[t][nt], pa[t][kk], b[0], b[1]);
                    mma16816<F16>(o[t][nt + 1], pa[t][kk], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with buffer `st` before the next iteration refills it
        st ^= 1;
    }
    const long long stride = (long long)heads * HD;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
        float a = l0[t], b = l1[t];
        a += __shfl_xor_sync(0xffffffffu, a, 1);
        a += __shfl_xor_sync(0xffffffffu, a, 2);
        b += __shfl_xor_sync(0xffffffffu, b, 1);
        b += __shfl_xor_sync(0xffffffffu, b, 2);
        const float i0 = 1.0f / a, i1 = 1.0f / b;
        const int r1 = r0[t] + 8;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const int d = h * HD + nt * 8 + tq * 2;
            if (ok0[t])
                *(unsigned*)(out + (long long)r0[t] * stride + d) = pack2<F16>(o[t][nt][0] * i0, o[t][nt][1] * i0);
            if (ok1[t])
                *(unsigned*)(out + (long long)r1 * stride + d) = pack2<F16>(o[t][nt][2] * i1, o[t][nt][3] * i1);
        }
    }
}

// 8 warps x 16 queries (two blocks per SM at <= 128 registers a thread); 4 warps x 32 queries
// (half the shared-memory traffic per MMA, more registers a thread). `_f16`: half inputs.
#define ATTN_MMA_KERNEL(NAME, WARPS, MT, F16)                                                          \
    extern "C" __global__ void __launch_bounds__(WARPS * 32, 2)                                       \
        NAME(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k, const bf16_t* __restrict__ v, \
             const int4* __restrict__ tiles, bf16_t* __restrict__ out, int n, int heads, float scale_log2) { \
        attention_mma_body<WARPS, MT, F16>(q, k, v, tiles, out, n, heads, scale_log2);                \
    }
ATTN_MMA_KERNEL(attention_mma, 8, 1, false)
ATTN_MMA_KERNEL(attention_mma_w4, 4, 2, false)
ATTN_MMA_KERNEL(attention_mma_f16, 8, 1, true)
ATTN_MMA_KERNEL(attention_mma_w4_f16, 4, 2, true)
#endif
