// f32 activations on f16 tensor cores without giving up f32 precision ("exact" mode), for the small-n
// products of decode (mma.sync m16n8k16, f32 accumulation).
//
// Activations: each 128-element chunk of a row is scaled by a power of two s (max |x| s in [2^14, 2^15)) and
// split into hi = f16(x s) and lo = f16(x s - hi): hi + lo holds 22 bits of every element that is at least
// 2^-28 of the chunk's max, and the product of an f16 weight with hi or lo is exact in f32. The chunk is
// stored in the order of the B fragments (`ActChunk`), so a thread loads its 16 registers with four 16-byte
// loads, and 1/s beside it; a chunk's partial product is multiplied by 1/s (exact) before it joins the sum.
//
// Weights: a thread owns 16 contiguous bytes of a weight row per chunk (fp4: 32 elements, one UE8M0 group).
// The K order inside a chunk is permuted so that those bytes feed its A fragments directly; the activation
// chunk uses the same permutation, and a dot product does not depend on the order of its terms' positions.
#pragma once

#include <cuda_fp8.h>

#include "ops/cuda/device_util.cuh"

namespace di::cuda::mma {

inline constexpr int kChunk = 128;              // K elements per activation scale
inline constexpr int kChunkWords = 2 * 4 * 16;  // u32 per (row, chunk): [hi, lo][q = lane % 4][16]

// Element e (0..127) of a chunk: thread q = e / 32 owns elements 32q .. 32q + 31 (one 16-byte fp4 unit:
// word i holds elements 8i .. 8i + 7, nibble m of the word is element 8i + m). k-step 2i + h of the chunk
// takes from word i the pairs (m, m + 4) for m = 2h (B register 0) and m = 2h + 1 (B register 1); the pair's
// first element is the low f16.
__host__ __device__ constexpr int act_word(int e) {
    const int q = e >> 5, i = (e & 31) >> 3, m = e & 7;
    return q * 16 + (2 * i + ((m & 3) >> 1)) * 2 + (m & 1);
}
__host__ __device__ constexpr int act_half(int e) { return (e & 7) >> 2; }
// The fp8 order: thread q's 32 elements are 32 bytes, word s holds elements 4s .. 4s + 3, and k-step s takes
// the pairs (4s, 4s + 1) (B register 0) and (4s + 2, 4s + 3) (register 1): one cvt per f16 pair.
__host__ __device__ constexpr int act_word_fp8(int e) {
    return (e >> 5) * 16 + ((e & 31) >> 2) * 2 + ((e & 3) >> 1);
}
__host__ __device__ constexpr int act_half_fp8(int e) { return e & 1; }

// Activations of `rows` rows [rows, K] (K a multiple of 128) as chunks: data [rows, K / 128, kChunkWords]
// and inv [rows, K / 128] (1/s).
struct ActChunks {
    uint32_t* data;
    float* inv;
};
// The power of two 2^sh that puts m (a chunk's or a row's max |x|) in [2^14, 2^15); 0 and inf keep 2^0.
__device__ __forceinline__ int chunk_shift(float m) {
    if (!(m > 0.0f && m <= 3.4e38f)) return 0;
    int e;
    frexpf(m, &e);  // m = f 2^e, f in [0.5, 1)
    return min(max(15 - e, -120), 120);
}
// The max of v over a block of kWarps warps (every thread gets it); red: kWarps floats of shared memory.
template <int kWarps>
__device__ __forceinline__ float block_max(float v, float* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();  // red's readers of a previous call are done
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[w]);
    return m;
}
// chunk_shift of the max |x| of a row of n floats, by a block of kWarps warps (every thread gets it).
template <int kWarps>
__device__ __forceinline__ int row_shift(const float* row, int64_t n, float* red) {
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, fabsf(row[i]));  // fmaxf skips NaN
    return chunk_shift(block_max<kWarps>(m, red));
}

// One chunk by one warp with a given shift: the chunk's 128 floats (lane l holds elements l + 32 j in v[j]),
// times 2^sh, to hi/lo words at dst.
template <bool kFp8Order>
__device__ __forceinline__ void warp_chunk_values(const float (&v)[4], uint32_t* dst_words, int sh,
                                                  int lane) {
    const float s = __int_as_float((127 + sh) << 23);
    __half* dst = reinterpret_cast<__half*>(dst_words);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int e = 32 * j + lane;
        const float xs = v[j] * s;
        const __half hi = __float2half_rn(xs);
        const __half lo = __float2half_rn(xs - __half2float(hi));
        const int at = kFp8Order ? act_word_fp8(e) * 2 + act_half_fp8(e) : act_word(e) * 2 + act_half(e);
        dst[at] = hi;
        dst[2 * 64 + at] = lo;  // the lo half of the chunk follows the 64 words of hi
    }
}
// The same from 128 floats at src.
template <bool kFp8Order>
__device__ __forceinline__ void warp_chunk_at(const float* src, uint32_t* dst_words, int sh, int lane) {
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = src[32 * j + lane];
    warp_chunk_values<kFp8Order>(v, dst_words, sh, lane);
}
// One chunk by one warp: 128 floats at src to its kChunkWords words at dst and its 1/s at *inv (lane 0).
template <bool kFp8Order>
__device__ __forceinline__ void warp_chunk(const float* src, uint32_t* dst_words, float* inv, int lane) {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) m = fmaxf(m, fabsf(src[32 * j + lane]));  // fmaxf skips NaN
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int sh = chunk_shift(m);
    warp_chunk_at<kFp8Order>(src, dst_words, sh, lane);
    if (lane == 0) *inv = __int_as_float((127 - sh) << 23);
}

// warp_chunk of the chunk quantised as the native precision's activations are (act_quant.cu: e4m3 under the
// chunk's power-of-two scale, back to f32): the bits warp_chunk gives on the quantiser's copy. The copy's
// largest magnitude is the quantised largest magnitude (the rounding is monotonic and odd).
template <bool kFp8Order>
__device__ __forceinline__ void warp_chunk_quantised(const float* src, uint32_t* dst_words, float* inv,
                                                     int lane) {
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = src[32 * j + lane];
    const float m = warp_block_amax(v), s = act_quant_scale(m);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = act_quant_round_trip(v[j], s);
    // fmaxf: an infinite m makes the copy all NaN, whose maximum warp_chunk takes as 0
    const int sh = chunk_shift(fmaxf(0.0f, act_quant_round_trip(m, s)));
    warp_chunk_values<kFp8Order>(v, dst_words, sh, lane);
    if (lane == 0) *inv = __int_as_float((127 - sh) << 23);
}

// fp8_order: act_word_fp8's order (linear_mma.cu) instead of act_word's (fp4 weights, moe_mma.cu).
void launch_act_chunks(const float* x, int64_t ldx, int64_t rows, int64_t K, ActChunks out, bool fp8_order,
                       cudaStream_t s);
// The same chunks (fp4 or fp8 order) with one scale per row instead of per chunk: inv [rows] holds the row's
// 1/s. Its hi + lo keep 22 bits of every element that is at least 2^-17 of the row's max, and elements below
// that to within 2^-39 of the max: far under f32's rounding of the sums they enter. Lets a product
// accumulate a row's chunks without scaling each chunk's partial sum (moe_gemm.cu).
void launch_act_rows(const float* x, int64_t ldx, int64_t rows, int64_t K, ActChunks out, cudaStream_t s,
                     bool fp8_order = false);

// 2^e as a float (e in -126 .. 127).
__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); }
// Two floats as an f16 pair, x the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float x, float y) {
    return uint32_t(__half_as_ushort(__float2half_rn(x))) |
           (uint32_t(__half_as_ushort(__float2half_rn(y))) << 16);
}
// Four 8x8 f16 matrices from shared memory (lane l gives row l % 8 of matrix l / 8), plain or transposed.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(unsigned(__cvta_generic_to_shared(p))));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(unsigned(__cvta_generic_to_shared(p))));
}

// The shift of an all-zero row (warp_row_to_f16): larger than any chunk_shift, so never a tile's smallest.
inline constexpr int kEmptyRowShift = 120;
// A row of 128 V floats by one warp (lane l: float4s l + 32 i): the row times 2^sh as f16 at dst, sh the
// chunk_shift of its max |x| (kEmptyRowShift for an all-zero row, left unscaled); returns sh.
template <int V>
__device__ __forceinline__ int warp_row_to_f16(const float* src, __half* dst, int lane) {
    float4 v[V];
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        v[i] = __ldg(reinterpret_cast<const float4*>(src) + lane + 32 * i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int sh = m > 0.0f ? chunk_shift(m) : kEmptyRowShift;
    const float s = pow2f(m > 0.0f ? sh : 0);
#pragma unroll
    for (int i = 0; i < V; ++i)
        reinterpret_cast<uint2*>(dst)[lane + 32 * i] =
            make_uint2(pack_f16x2(v[i].x * s, v[i].y * s), pack_f16x2(v[i].z * s, v[i].w * s));
    return sh;
}

// d += a (16 x 32 e4m3, row) . b (32 x 8 e4m3, col), f32 accumulation.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// s[nt] = the warp's 16 A rows (qa: KK k16 fragments) times the 8 B columns of tile nt (NT tiles), B from f16
// rows `ld` halves apart in shared memory, read by ldmatrix: kb is this lane's row address (matrix lane / 8 =
// k + 8 (odd), columns + 8 (>= 2)), tile nt at kb + 8 nt ld, k-step kk 16 halves further.
template <int KK, int NT>
__device__ __forceinline__ void mma_rows_by_smem_cols(float (&s)[NT][4], const uint32_t (&qa)[KK][4],
                                                      const __half* kb, int ld) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b[4];
            ldsm_x4(b, kb + nt * 8 * ld + 16 * kk);
            mma16816(s[nt], qa[kk], b[0], b[1]);
            mma16816(s[nt + 1], qa[kk], b[2], b[3]);
        }
}

// Nibbles idx and idx + 4 of fp4 word w as an f16 pair times 2^-14 (exact: the 3 magnitude bits become the
// f16's low exponent bits and its first mantissa bit, e2m1's subnormal 0.5 an f16 subnormal).
template <int idx>
__device__ __forceinline__ uint32_t fp4_pair(uint32_t w) {
    constexpr int b = 4 * idx;
    const uint32_t mag = b <= 9 ? w << (9 - b) : w >> (b - 9);
    const uint32_t sgn = b <= 12 ? w << (12 - b) : w >> (b - 12);
    return (mag & 0x0E000E00u) | (sgn & 0x80008000u);
}

// The f16 pair (2^(14 + e), 2^(14 + e)) for a UE8M0 byte 2^e: multiplying fp4_pair by it applies the
// group scale exactly while the result stays representable, which fp4_scale_ok guarantees.
__device__ __forceinline__ uint32_t fp4_multiplier(uint32_t e8m0) {
    const uint32_t bits = (e8m0 - 98u) << 10;
    return bits | (bits << 16);
}
// UE8M0 bytes for which every e2m1 value times the scale is an exact f16 (0.5 * 2^e >= 2^-24, 6 * 2^e <=
// 65504) and 2^(14 + e) is a normal f16.
inline constexpr int kFp4F16ScaleMin = 127 - 23, kFp4F16ScaleMax = 127 + 1;

// Word i (0..3) of a 16-byte register, and word s of N of them (a weight row's 16-byte units, a token's
// B-fragment loads).
__device__ __forceinline__ uint32_t word_of(const uint4& u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
template <int N>
__device__ __forceinline__ uint32_t word_of(const uint4 (&h)[N], int s) {
    return word_of(h[s >> 2], s & 3);
}

// The low two e4m3 bytes of v as an f16 pair (exact: e4m3 is a subset of f16).
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t v) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v & 0xffffu), __NV_E4M3);
    return uint32_t(r.x) | (uint32_t(r.y) << 16);
}

__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&r);
}

// The A fragments of k-steps 2i (k0) and 2i + 1 (k1) from word i of rows g (w0) and g + 8 (w1) of the fp4
// units, with their group scales' multipliers m0 and m1 (fp4_multiplier) folded in: k-step 2i takes the
// nibble pairs (0, 4) and (1, 5), 2i + 1 the pairs (2, 6) and (3, 7).
__device__ __forceinline__ void fp4_a_frags(uint32_t w0, uint32_t w1, uint32_t m0, uint32_t m1,
                                            uint32_t (&k0)[4], uint32_t (&k1)[4]) {
    k0[0] = hmul2_bits(fp4_pair<0>(w0), m0), k0[1] = hmul2_bits(fp4_pair<0>(w1), m1);
    k0[2] = hmul2_bits(fp4_pair<1>(w0), m0), k0[3] = hmul2_bits(fp4_pair<1>(w1), m1);
    k1[0] = hmul2_bits(fp4_pair<2>(w0), m0), k1[1] = hmul2_bits(fp4_pair<2>(w1), m1);
    k1[2] = hmul2_bits(fp4_pair<3>(w0), m0), k1[3] = hmul2_bits(fp4_pair<3>(w1), m1);
}

}  // namespace di::cuda::mma
