// The short-1-D family's kernels: depthwise dW of short 1-D filters (Mamba's causal k = 4, k = 2..9) on CUDA
// cores, sm_80+. Built at run time by NVRTC (launcher.py), one build a (dtype, TAPS, PAD, DIL): the taps, the
// left padding and the dilation are compile-time, so every register index below is a constant.
//
// For one channel, stride 1,
//   dW[k] = sum_{n, o} X[n, o + DIL k - PAD] dY[n, o]  =  sum_{n, m} X[n, m] dY[n, m + PAD - DIL k]
// (X zero outside 0 <= m < L, dY outside 0 <= o < LO). One warp owns one channel; a step is a chunk of 256
// input positions m, V = 8 a lane (one 16-byte vector of x, and of grad_output at the same positions). For its
// positions m = a + 8 lane + i a lane needs grad_output at offsets j = i + PAD - DIL k from a + 8 lane:
// J_LO = PAD - DIL (TAPS - 1) .. J_HI = 7 + PAD, i.e. its own vector and parts of its neighbours' (J_LO >= -8,
// J_HI <= 15: the launcher's gate). The neighbours' words come by one warp shuffle each; lane 0's left and lane
// 31's right neighbour are outside the chunk and come from one more 16-byte load (the halo: lane 0 reads
// a - 8.., lane 31 a + 256..; the other lanes skip it). Per lane and step: 2 vector loads (+ the halo), a
// shuffle per neighbour word used, 8 + 8 + (TAPS - 1) DIL conversions, 8 TAPS fp32 FMAs into TAPS accumulators;
// no shared memory, no barrier. The next step's loads are issued before this step's FMAs (one step in flight).
// A warp walks its split's chunks in (image, chunk) order: the splits are equal runs of that flat index
// (deterministic, no atomics), each warp's TAPS sums reduced across its lanes in a fixed order into the
// fp32 partial part[split, C, TAPS] that the shared ordered reduction sums.
// 16-byte loads need an operand unit-stride along the sequence, every row start a multiple of 8 elements and
// its pointer 16-byte aligned (launcher.vector_operand; contiguous NCHW: L % 8 == 0 for the input, LO % 8 == 0
// for grad_output), decided per operand (load_step); a chunk's tail past L or LO is loaded element by element,
// and an operand without vectors is loaded element by element through its strides.

#ifndef TAPS
#error "TAPS, PAD and DIL are defines of the build (launcher._build_options)"
#endif

typedef unsigned short elem_t;
typedef unsigned int u32;

#define WARPS 4
// 6 CTAs of 4 warps resident an SM (<= 80 registers; 24 warps, each with a step of 1 KB in flight): the
// launcher's TARGET_CTAS. Without a bound ptxas kept some builds at 56 registers with 8 bytes of spills, and at 8
// CTAs (<= 64) the element-load kernels of the wider windows spilled 8 bytes (nvcc 13.0, sm_90).
#define MIN_CTAS 6
#define V 8
#define CHUNK (32 * V)
#define J_LO (PAD - DIL * (TAPS - 1))
#define J_HI (7 + PAD)
#define NEEDS_LEFT (J_LO < 0)
#define NEEDS_RIGHT (J_HI >= V)
static_assert(J_LO >= -V && J_HI < 2 * V, "grad_output offsets past one neighbour vector (the gate refuses them)");

struct Vec { u32 w[V / 2]; };

__device__ __forceinline__ float elem_to_float(u32 word, int half) {
#ifndef ELEM_IS_FP16
    return __uint_as_float(half ? (word & 0xffff0000u) : (word << 16));
#else
    const unsigned short bits = half ? (unsigned short)(word >> 16) : (unsigned short)(word & 0xffffu);
    float f;
    asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(bits));
    return f;
#endif
}

// V elements from position p of a row (base pointer, element stride s, length n): one 16-byte load where
// VECTOR_LOADS holds and the whole vector is inside, V unmasked loads where only the latter does, else element
// by element with zeros outside 0 <= p < n.
template <bool VECTOR_LOADS>
__device__ __forceinline__ Vec load_vec(const elem_t* row, long long p, long long n, long long s) {
    Vec v;
    if (p >= 0 && p + V <= n) {
        if (VECTOR_LOADS) {
            const uint4 q = *reinterpret_cast<const uint4*>(row + p);
            v.w[0] = q.x; v.w[1] = q.y; v.w[2] = q.z; v.w[3] = q.w;
        } else {
            const elem_t* e = row + p * s;
#pragma unroll
            for (int i = 0; i < V / 2; ++i, e += 2 * s) v.w[i] = (u32)e[0] | ((u32)e[s] << 16);
        }
        return v;
    }
#pragma unroll
    for (int e = 0; e < V / 2; ++e) {
        const long long p0 = p + 2 * e, p1 = p0 + 1;
        const u32 lo = (p0 >= 0 && p0 < n) ? row[p0 * s] : 0u;
        const u32 hi = (p1 >= 0 && p1 < n) ? row[p1 * s] : 0u;
        v.w[e] = lo | (hi << 16);
    }
    return v;
}

struct Step { Vec x, d, halo; };

// X_VEC / D_VEC: the input / grad_output rows take 16-byte loads (unit stride along the sequence, rows on
// multiples of 8 elements, the pointer 16-byte aligned); either may hold alone (Mamba's grad_output rows are
// L + 3 long: its input takes vectors, its grad_output element loads).
template <bool X_VEC, bool D_VEC>
__device__ __forceinline__ Step load_step(const elem_t* xrow, const elem_t* drow, long long a, int lane, int L,
                                          int LO, long long sxw, long long sdw) {
    Step st;
    const long long p = a + V * lane;
    st.x = load_vec<X_VEC>(xrow, p, L, sxw);
    st.d = load_vec<D_VEC>(drow, p, LO, sdw);
    // lane 0: the vector before the chunk (its left neighbour); lane 31: the one after it (its right)
    const bool halo_lane = (NEEDS_LEFT && lane == 0) || (NEEDS_RIGHT && lane == 31);
    if (halo_lane) {
        st.halo = load_vec<D_VEC>(drow, lane == 0 ? a - V : a + CHUNK, LO, sdw);
    } else {
#pragma unroll
        for (int e = 0; e < V / 2; ++e) st.halo.w[e] = 0u;
    }
    return st;
}

// acc[k] += sum_i x[i] * w[i + PAD - DIL k], w the lane's grad_output window (offsets J_LO .. J_HI).
__device__ __forceinline__ void accumulate(float (&acc)[TAPS], const Step& st, int lane) {
    constexpr unsigned FULL = 0xffffffffu;
    float xf[V];
#pragma unroll
    for (int i = 0; i < V; ++i) xf[i] = elem_to_float(st.x.w[i / 2], i & 1);
    // the window: wf[j - J_LO] for j in J_LO .. J_HI; only the neighbour words a tap reads are shuffled
    float wf[J_HI - J_LO + 1];
#pragma unroll
    for (int j = J_LO; j <= J_HI; ++j) {
        if (j >= 0 && j < V) wf[j - J_LO] = elem_to_float(st.d.w[j / 2], j & 1);
    }
    if (NEEDS_LEFT) {
#pragma unroll
        for (int e = (J_LO + V) / 2; e < V / 2; ++e) {
            u32 word = __shfl_up_sync(FULL, st.d.w[e], 1);
            if (lane == 0) word = st.halo.w[e];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * e + h - V;
                if (j >= J_LO) wf[j - J_LO] = elem_to_float(word, h);
            }
        }
    }
    if (NEEDS_RIGHT) {
#pragma unroll
        for (int e = 0; e <= (J_HI - V) / 2; ++e) {
            u32 word = __shfl_down_sync(FULL, st.d.w[e], 1);
            if (lane == 31) word = st.halo.w[e];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * e + h + V;
                if (j <= J_HI) wf[j - J_LO] = elem_to_float(word, h);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < TAPS; ++k) {
#pragma unroll
        for (int i = 0; i < V; ++i) acc[k] = fmaf(xf[i], wf[i + PAD - DIL * k - J_LO], acc[k]);
    }
}

#define SHORT1D_PARAMS                                                                                         \
    const elem_t* __restrict__ x, const elem_t* __restrict__ dy, float* __restrict__ part, int N, int C, int L, \
    int LO, int chunks_per_image, long long chunks_per_split, long long sxn, long long sxc, long long sxw,      \
    long long sdn, long long sdc, long long sdw

template <bool X_VEC, bool D_VEC>
__device__ __forceinline__ void short1d(SHORT1D_PARAMS) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.x * WARPS + warp, split = blockIdx.y;
    if (c >= C) return;   // whole warps: the shuffles below see all 32 lanes
    const long long total = (long long)N * chunks_per_image;
    const long long f_begin = min(total, (long long)split * chunks_per_split);
    const long long f_end = min(total, f_begin + chunks_per_split);
    float acc[TAPS];
#pragma unroll
    for (int k = 0; k < TAPS; ++k) acc[k] = 0.f;
    if (f_begin < f_end) {
        int n = (int)(f_begin / chunks_per_image), chunk = (int)(f_begin % chunks_per_image);
        Step st = load_step<X_VEC, D_VEC>(x + n * sxn + c * sxc, dy + n * sdn + c * sdc, (long long)chunk * CHUNK,
                                          lane, L, LO, sxw, sdw);
        for (long long f = f_begin; f < f_end; ++f) {
            if (++chunk == chunks_per_image) { chunk = 0; ++n; }
            Step next;
            if (f + 1 < f_end) {   // the next chunk's loads in flight while this one's FMAs run
                next = load_step<X_VEC, D_VEC>(x + n * sxn + c * sxc, dy + n * sdn + c * sdc,
                                               (long long)chunk * CHUNK, lane, L, LO, sxw, sdw);
            }
            accumulate(acc, st, lane);
            st = next;
        }
    }
    float* out = part + ((long long)split * C + c) * TAPS;
#pragma unroll
    for (int k = 0; k < TAPS; ++k) {
        float v = acc[k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) out[k] = v;
    }
}

// The kernels, by name (launcher.KERNEL_NAMES): 16-byte loads of both operands, of the input only, of
// grad_output only, of neither.
#define SHORT1D_KERNEL(SUFFIX, X_VEC, D_VEC)                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_CTAS) wgrad_short1d##SUFFIX##_kernel(SHORT1D_PARAMS) { \
        short1d<X_VEC, D_VEC>(x, dy, part, N, C, L, LO, chunks_per_image, chunks_per_split, sxn, sxc, sxw, sdn,  \
                              sdc, sdw);                                                                      \
    }
SHORT1D_KERNEL(, true, true)
SHORT1D_KERNEL(_xvec, true, false)
SHORT1D_KERNEL(_dyvec, false, true)
SHORT1D_KERNEL(_strided, false, false)
