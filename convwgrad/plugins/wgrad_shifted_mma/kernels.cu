// The shifted-MMA family's kernels: depthwise dW of large filters as a shifted GEMM on mma.sync
// (sm_80+). Built at run time by NVRTC (launcher.py); one source for bf16 and fp16. The operands
// are read through their element strides (n, c, h, w), so NCHW, channels_last and strided views
// run in place. wgrad_shifted_mma_kernel takes any strides: a row costs each lane four 2-byte loads
// (the NCHW loads were never vectors); in channels_last a warp's row load touches 32 sectors instead
// of 2 (H100, session 12: 1.57x NCHW's time on the 31x31 56x56 layer, L1/TEX-bound). The cooperative
// channels_last kernels (wgrad_shifted_mma_cl4[_t16]_kernel, at the end) load a vector of the CTA's
// adjacent channels a position instead, with one CTA barrier a row.
//
// For one channel, stride 1 and dilation (DH, DW),
//   dW[ky, kx] = sum_{n, r, ow} Xpad[n, r, ow + DW kx] * dY[n, r + PH - DH ky, ow]
// (r an input row, Xpad the input row padded by PW on the left). Per input row r and 16 output
// columns ow0.., that is D[kx, ky] += A[kx, j] * B[j, ky] with
//   A[kx, j] = Xpad[r, ow0 + j + DW kx]       (a Hankel view of one input row, every DW-th diagonal: M = 32 kx)
//   B[j, ky] = dY[r + PH - DH ky, ow0 + j]    (a Toeplitz view of the last DH (KH - 1) + 1 grad_output rows,
//                                              every DH-th: N = 32 ky)
// so the matrix unit does pad(KW) x pad(KH) multiply-adds a position, none wasted on channel pairs
// (the merged family's diagonal computes 16x the real work at Gm = 16). Dilation changes only these
// index maps: the staging, the ring and the MMAs are those of dilation 1.
//
// One warp owns one channel and all its output columns (up to 4 blocks of 16) for a run of images
// (one split), with private shared buffers, so a row needs no CTA barrier:
// - the input row goes to shared memory twice, as Xpad and as Xpad shifted by one element, so that
//   every (kx, j..j+1) pair of an A fragment is one aligned 32-bit load (DW kx even: copy 0; odd: copy 1);
// - grad_output rows go to a ring of RING = 33 rows (a step reads rows up to DH (KH - 1) <= 31 back, so
//   the row written for step r + 1, 32 back, is none that step r reads); B comes by ldmatrix.x4, a row
//   address a lane, so the ring's rotation costs nothing;
// - the next step's rows are prefetched into registers while this step's MMAs run.
// Per warp, row and 16 columns: 8 ld.shared.b32 (A; fewer at DW = 1, mma_row), 2 ldmatrix.x4 (B),
// 8 mma.sync.m16n8k16 into 32 fp32 accumulators. Each warp writes its channel's fp32 partial
// [split, C, KH, KW]; the shared ordered reduction sums the splits (deterministic).
// Limits (launcher.py checks them): stride 1, depthwise, KH, KW <= 32, W, OW <= 64, top padding
// <= 32; dilation any with DH (KH - 1) <= 31 (the ring) and OW rounded up to 16 + DW (KW - 1) <= COPY_LEN
// (every A read of a 16-column block inside its staged copy).
// History: a first version (one CTA a channel, 4 warps = 4 column blocks, a CTA barrier and a
// modulo a row, B by 32-bit loads) took 223 us on RepLKNet-31B's 31x31 56x56 C128 N=32 layer, issue-
// bound (ncu: 55 % issue slots, IPC 2.3); this one 117 us (notes/PERF.md, session 11).

#ifndef ELEM_IS_FP16
#define MMA_TYPE "bf16"
#else
#define MMA_TYPE "f16"
#endif

typedef unsigned short elem_t;   // bf16 or fp16 bits: the kernel only moves them and feeds the MMA
typedef unsigned int u32;

#define RING 33
#define RING_STRIDE 72           // elements; 36 words: rows g = 0..7 of a B fragment hit banks 4g + t
#define COPY_LEN 160             // elements; copy 1 starts 80 words after copy 0 (bank offset 16)
#define XBUF (2 * COPY_LEN)
#define COLS 64                  // 4 blocks of 16 output columns

__device__ __forceinline__ u32 lds32(const elem_t* p) { return *reinterpret_cast<const u32*>(p); }

__device__ __forceinline__ void mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#define WARPS 4
// No minimum of CTAs an SM. Session 11's kernel took 102 registers (4 CTAs of 4 warps an SM), and capping
// them at 96 (5 CTAs) was 3-11 % slower on all 8 layers timed (H200); at 80 (6 CTAs) it spilled.

__device__ __forceinline__ void ldsm_x4(u32& r0, u32& r1, u32& r2, u32& r3, const elem_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

// The tap tile: MT m16 tiles of kx x NT n8 tiles of ky. 32 x 32 (MT 2, NT 4) for filters up to 32 a side;
// 16 x 16 (MT 1, NT 2) for filters up to 16 a side, a quarter of the MMAs (a 13x13 filter fills 66 % of
// it, 17 % of 32 x 32). The launcher picks one by the filter.
// One row step of one warp: D[kx, ky] += A[kx, j] * B[j, ky] over the row's 16-column blocks, A from the
// staged input row xb (two copies), B by ldmatrix from the ring rows slot - DH ky.
// Tile columns ky >= KH feed dropped D entries only; their ring rows are those of KH - 1, so that no read
// reaches further back than DH (KH - 1) (a dilated 32nd tap would: 31 DH rows). DILATED_COLS (DW > 1)
// does the same for rows kx >= KW (31 DW columns would pass the staged copy). At DW = 1 the A offsets
// stay compile-time and unclamped (kx <= 31 reads within the copy): A[kx, j + 8] is then A[kx + 8, j]
// and block cb's rows kx + 16 are block cb + 1's rows kx, and nvcc shares those loads (sm_90 SASS of the
// 32 x 32 tile: 19 ld.shared for 8 blocks instead of 64); dilated columns have no such overlap.
template <int MT, int NT, bool DILATED_COLS>
__device__ __forceinline__ void mma_row(float (&acc)[MT][NT][4], const elem_t* xb, const elem_t* ring, int slot,
                                        int col_blocks, int lane, int KH, int KW, int DH, int DW) {
    const int g = lane >> 2, t = lane & 3;
    // this lane's A offsets, the same for every column block: rows kx = 16 mt + g + 8 h, columns 2t, 2t + 1
    // (+ 8: a[mt][2 + h]), Xpad[2t + DW kx] in the copy whose pairs start there aligned
    int a_off[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int kx = 16 * mt + g + 8 * h;
            const int shift = DILATED_COLS ? DW * min(kx, KW - 1) : kx;
            const int odd = shift & 1;
            a_off[mt][h] = odd * COPY_LEN + 2 * t + shift - odd;
        }
    // ldmatrix row of this lane: matrix i = lane / 8 (ky tile nt + (i >> 1), columns (i & 1) * 8), row lane % 8
    const int lm_ky = 8 * (lane >> 4) + (lane & 7), lm_col = ((lane >> 3) & 1) * 8;
    // ring rows of ky = lm_ky and lm_ky + 16, at most DH (KH - 1) <= RING - 2 back: one wrap
    int s0 = slot - DH * min(lm_ky, KH - 1); s0 += s0 < 0 ? RING : 0;
    int s1 = slot - DH * min(lm_ky + 16, KH - 1); s1 += s1 < 0 ? RING : 0;
    for (int cb = 0; cb < col_blocks; ++cb) {
        const int ow0 = cb * 16;
        u32 a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const elem_t* base = xb + ow0 + a_off[mt][h];
                a[mt][h] = lds32(base);
                a[mt][2 + h] = lds32(base + 8);
            }
        }
        u32 b[NT][2];
#pragma unroll
        for (int q = 0; q < NT / 2; ++q)   // ky tiles 2q, 2q + 1: ring rows slot - DH ky
            ldsm_x4(b[2 * q][0], b[2 * q][1], b[2 * q + 1][0], b[2 * q + 1][1],
                    ring + (q ? s1 : s0) * RING_STRIDE + ow0 + lm_col);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                mma16816(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[nt][0], b[nt][1]);
    }
}

template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int b = 0; b < NT; ++b)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[a][b][e] = 0.f;
}

// The ring at an image's start. A step reads ring rows up to span = DH (KH - 1) back (mma_row), only those
// of ky < KH reach dW (the other D columns are dropped), and the ring's columns past OW stay zero from the
// kernel's start (rows are only ever written up to OW). So an image needs span rows written before its
// first step: grad_output rows 0 .. PH - 1 (preloaded; zero past OH) in slots 0 .. PH - 1, and the rows
// above the image that the first steps read (rows PH - span .. -1, zeros) in the ring's last span - PH
// slots. The rest hold finite rows of an earlier image (or zeros) and feed dropped columns only. Per image
// that is span x OW elements instead of clearing and preloading the whole ring (33 x 72 + PH x 64): the
// ring was most of the work on the 14x14 and 7x7 layers, whose 14 or 7 steps an image are few.
__device__ __forceinline__ int prologue_rows(int span, int PH) { return PH + max(0, span - PH); }
__device__ __forceinline__ int prologue_slot(int i, int span, int PH) {   // i < prologue_rows(span, PH)
    return i < PH ? i : RING - (span - PH) + (i - PH);
}

// The warp's fp32 partial of channel c: part[split, c, ky, kx] from the accumulator fragments.
template <int MT, int NT>
__device__ __forceinline__ void store_partial(const float (&acc)[MT][NT][4], float* __restrict__ part, int split,
                                              int C, int c, int KH, int KW, int lane) {
    const int g = lane >> 2, t = lane & 3;
    float* out = part + ((long long)split * C + c) * KH * KW;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int kx = 16 * mt + g + 8 * (e >> 1), ky = 8 * nt + 2 * t + (e & 1);
                if (ky < KH && kx < KW) out[ky * KW + kx] = acc[mt][nt][e];
            }
}

#define KERNEL_PARAMS                                                                                             \
    const elem_t* __restrict__ x, const elem_t* __restrict__ dy, float* __restrict__ part, int N, int C, int H,  \
    int W, int OH, int OW, int KH, int KW, int PH, int PW, int DH, int DW, int images_per_split, long long sxn,  \
    long long sxc, long long sxh, long long sxw, long long sdn, long long sdc, long long sdh, long long sdw
#define KERNEL_ARGS x, dy, part, N, C, H, W, OH, OW, KH, KW, PH, PW, DH, DW, images_per_split, sxn, sxc, sxh, sxw, \
    sdn, sdc, sdh, sdw

// Any strides: each warp loads its own channel's rows, 2-byte loads, no CTA barrier.
template <int MT, int NT, bool DILATED_COLS>
__device__ __forceinline__ void any_strides(KERNEL_PARAMS) {
    __shared__ __align__(16) elem_t xs_all[WARPS][2 * XBUF];
    __shared__ __align__(16) elem_t ring_all[WARPS][RING * RING_STRIDE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.x * WARPS + warp, split = blockIdx.y;
    if (c >= C) return;   // whole warps only: no CTA barrier follows
    elem_t* xs = xs_all[warp];
    elem_t* ring = ring_all[warp];
    const int n_begin = split * images_per_split;
    const int n_end = min(N, n_begin + images_per_split);
    const int col_blocks = (OW + 15) >> 4;
    // element offsets of this lane's two columns (lane, lane + 32) in an input and a grad_output row
    const long long xo0 = lane * sxw, xo1 = (lane + 32) * sxw, do0 = lane * sdw, do1 = (lane + 32) * sdw;

    for (int i = lane; i < 2 * XBUF; i += 32) xs[i] = 0;
    for (int i = lane; i < RING * RING_STRIDE; i += 32) ring[i] = 0;
    float acc[MT][NT][4];
    zero_acc(acc);
    const int span = DH * (KH - 1), ring_rows = prologue_rows(span, PH);

    for (int n = n_begin; n < n_end; ++n) {
        const elem_t* xn = x + n * sxn + c * sxc;
        const elem_t* dyn = dy + n * sdn + c * sdc;
        __syncwarp();   // the previous image's steps are done with the ring
        for (int i = 0; i < ring_rows; ++i) {
            const int slot = prologue_slot(i, span, PH);
            elem_t v0 = 0, v1 = 0;
            if (i < PH && i < OH) {
                if (lane < OW) v0 = dyn[i * sdh + do0];
                if (lane + 32 < OW) v1 = dyn[i * sdh + do1];
            }
            if (lane < OW) ring[slot * RING_STRIDE + lane] = v0;
            if (lane + 32 < OW) ring[slot * RING_STRIDE + lane + 32] = v1;
        }
        // prefetch step 0: lane holds input columns lane and lane + 32, grad_output columns alike
        elem_t xv0 = 0, xv1 = 0, dv0 = 0, dv1 = 0;
        if (lane < W) xv0 = xn[xo0];
        if (lane + 32 < W) xv1 = xn[xo1];
        if (PH < OH) {
            if (lane < OW) dv0 = dyn[PH * sdh + do0];
            if (lane + 32 < OW) dv1 = dyn[PH * sdh + do1];
        }
        int slot = PH % RING;   // ring slot of grad_output row r + PH
        for (int r = 0; r < H; ++r) {
            elem_t* xb = xs + (r & 1) * XBUF;
            if (lane < W) { xb[lane + PW] = xv0; if (lane + PW >= 1) xb[COPY_LEN + lane + PW - 1] = xv0; }
            if (lane + 32 < W) { xb[lane + 32 + PW] = xv1; xb[COPY_LEN + lane + 32 + PW - 1] = xv1; }
            if (lane < OW) ring[slot * RING_STRIDE + lane] = dv0;
            if (lane + 32 < OW) ring[slot * RING_STRIDE + lane + 32] = dv1;
            xv0 = xv1 = dv0 = dv1 = 0;
            if (r + 1 < H) {
                const elem_t* xr = xn + (r + 1) * sxh;
                if (lane < W) xv0 = xr[xo0];
                if (lane + 32 < W) xv1 = xr[xo1];
                if (r + 1 + PH < OH) {
                    const elem_t* dr = dyn + (r + 1 + PH) * sdh;
                    if (lane < OW) dv0 = dr[do0];
                    if (lane + 32 < OW) dv1 = dr[do1];
                }
            }
            __syncwarp();
            mma_row<MT, NT, DILATED_COLS>(acc, xb, ring, slot, col_blocks, lane, KH, KW, DH, DW);
            slot = slot + 1 == RING ? 0 : slot + 1;
        }
    }
    store_partial(acc, part, split, C, c, KH, KW, lane);
}

// Channels_last with cooperative loads: the CTA's CH warps own CH adjacent channels, which sit next to
// each other at every position, so one CH * 2-byte vector load a position brings a row to all of them
// (threads 0-63: input columns, 64-127: grad_output columns), each element written into its warp's
// staged row; one CTA barrier a row publishes the row. One barrier is enough: row r + 1 is written
// into the other input copy and into ring slot r + 1 + PH, which step r does not read (32 rows back, and
// a step reads at most DH (KH - 1) <= 31), and row r + 2's writes come after barrier r + 1, which every warp
// reaches only after step r. The general kernel's lanes each load a sector a 2-byte element in this
// layout (ncu, H100, session 12: L1/TEX 91 % busy, DRAM 8.7 %); here a sector brings CH channels.
// Launcher's conditions: channel stride 1 in both operands, C and every other stride multiples of CH,
// both pointers aligned to the vector.
template <int CH> struct ChannelVector;
template <> struct ChannelVector<4> { typedef uint2 type; };

template <int CH, int MT, int NT, bool DILATED_COLS>
__device__ __forceinline__ void cooperative_channels_last(KERNEL_PARAMS) {
    typedef typename ChannelVector<CH>::type vec_t;
    union Channels { vec_t v; elem_t e[CH]; };
    __shared__ __align__(16) elem_t xs_all[CH][2 * XBUF];
    __shared__ __align__(16) elem_t ring_all[CH][RING * RING_STRIDE];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int c0 = blockIdx.x * CH, split = blockIdx.y;   // every channel of the CTA exists (C % CH == 0)
    const int n_begin = split * images_per_split;
    const int n_end = min(N, n_begin + images_per_split);
    const int col_blocks = (OW + 15) >> 4;
    const int col = tid & 63;
    const bool x_loader = tid < 64 && col < W, dy_loader = tid >= 64 && tid < 128 && col < OW;
    const long long x_col = col * sxw + c0, dy_col = col * sdw + c0;

    for (int i = tid; i < CH * 2 * XBUF; i += 32 * CH) (&xs_all[0][0])[i] = 0;
    for (int i = tid; i < CH * RING * RING_STRIDE; i += 32 * CH) (&ring_all[0][0])[i] = 0;
    float acc[MT][NT][4];
    zero_acc(acc);
    const vec_t zero = {};
    const int span = DH * (KH - 1), ring_rows = prologue_rows(span, PH);

    for (int n = n_begin; n < n_end; ++n) {
        const elem_t* xn = x + n * sxn + x_col;
        const elem_t* dyn = dy + n * sdn + dy_col;
        __syncthreads();   // every warp is done with the previous image's rows
        for (int i = tid; i < ring_rows * COLS; i += 32 * CH) {
            const int row = i >> 6, cc = i & 63;
            if (cc >= OW) continue;
            Channels v;
            v.v = row < PH && row < OH ? *reinterpret_cast<const vec_t*>(dy + n * sdn + row * sdh + cc * sdw + c0) : zero;
            const int slot = prologue_slot(row, span, PH);
#pragma unroll
            for (int k = 0; k < CH; ++k) ring_all[k][slot * RING_STRIDE + cc] = v.e[k];
        }
        Channels v;   // this thread's column of the next row
        v.v = zero;
        if (x_loader) v.v = *reinterpret_cast<const vec_t*>(xn);
        if (dy_loader && PH < OH) v.v = *reinterpret_cast<const vec_t*>(dyn + PH * sdh);
        // no barrier here: row 0 goes to slot PH, none of the prologue's, and step 0's barrier publishes both
        int slot = PH % RING;
        for (int r = 0; r < H; ++r) {
            const int buf = (r & 1) * XBUF;
            if (x_loader) {
#pragma unroll
                for (int k = 0; k < CH; ++k) {
                    xs_all[k][buf + col + PW] = v.e[k];
                    if (col + PW >= 1) xs_all[k][buf + COPY_LEN + col + PW - 1] = v.e[k];
                }
            }
            if (dy_loader) {
#pragma unroll
                for (int k = 0; k < CH; ++k) ring_all[k][slot * RING_STRIDE + col] = v.e[k];
            }
            v.v = zero;
            if (r + 1 < H) {
                if (x_loader) v.v = *reinterpret_cast<const vec_t*>(xn + (r + 1) * sxh);
                if (dy_loader && r + 1 + PH < OH) v.v = *reinterpret_cast<const vec_t*>(dyn + (r + 1 + PH) * sdh);
            }
            __syncthreads();
            mma_row<MT, NT, DILATED_COLS>(acc, xs_all[warp] + buf, ring_all[warp], slot, col_blocks, lane, KH, KW,
                                          DH, DW);
            slot = slot + 1 == RING ? 0 : slot + 1;
        }
    }
    store_partial(acc, part, split, C, c0 + warp, KH, KW, lane);
}

// The kernels, by name: wgrad_shifted_mma[_dilated_cols][_cl<CH>][_t16]_kernel (launcher.stage1_kernel_name);
// _dilated_cols for DW > 1 (mma_row: at DW = 1 the A loads overlap and are shared), with the 16 x 16 tile
// only: NVRTC's build of the 32 x 32 cooperative one spilled 16 bytes (H100 machine, session 14; nvcc 13.0
// here did not), and dilated filters above 16 a side are rare (UniRepLKNet's branches are 3x3-7x7).
// t16's minimum of 4 CTAs an SM is only a hint that changes ptxas's choice: without it, it allocated 72
// registers and spilled 4 bytes (nvcc 13.0, sm_90); with it, 63 registers and no spill (60 with dilation's
// arguments; the _dilated_cols one 72).
#define TILE32_KERNELS(NAME, CH)                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) NAME##_kernel(KERNEL_PARAMS) {                      \
        any_strides<2, 4, false>(KERNEL_ARGS);                                                                    \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * CH) NAME##_cl##CH##_kernel(KERNEL_PARAMS) {                \
        cooperative_channels_last<CH, 2, 4, false>(KERNEL_ARGS);                                                  \
    }
#define TILE16_KERNELS(NAME, DILATED_COLS, CH)                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, 4) NAME##_t16_kernel(KERNEL_PARAMS) {               \
        any_strides<1, 2, DILATED_COLS>(KERNEL_ARGS);                                                             \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * CH) NAME##_cl##CH##_t16_kernel(KERNEL_PARAMS) {            \
        cooperative_channels_last<CH, 1, 2, DILATED_COLS>(KERNEL_ARGS);                                           \
    }
TILE32_KERNELS(wgrad_shifted_mma, 4)
TILE16_KERNELS(wgrad_shifted_mma, false, 4)
TILE16_KERNELS(wgrad_shifted_mma_dilated_cols, true, 4)

// ---- 1-D filters: the sequence kernels ------------------------------------------------------------------------
// For one channel, stride 1, dilation 1 and left padding P,
//   dW[k] = sum_{n, o} Xpad[n, o + k] * dY[n, o]          (Xpad[m] = x[m - P], zero outside 0 <= m - P < L)
// Fold the tap as k = kx + 16 ky (kx < 16, ky < 8: filters up to 128 taps) and let j = o + 16 ky:
//   dW[kx + 16 ky] = sum_{n, j} Xpad[n, j + kx] * dY[n, j - 16 ky]
// a GEMM D[kx, ky] = A[kx, j] B[j, ky] with A a Hankel view of the input (the 2-D kernels' row, never ending) and
// B the grad_output shifted by 16 ky, each read from one staged window of its sequence. One m16n8k16 MMA covers
// 16 positions j and 128 tap slots (a 31-tap filter fills 24 % of them, a 4-tap one 3 %): ~1 GFLOP a Conformer
// layer (L 512, C 256, N 32), far under its memory time, so the kernel's cost is the staging, not the MMAs.
// j runs over 0 .. LO + 16 (KR - 1) (KR = ceil(K / 16) tap rows; past LO the kept columns read zeros), in steps
// of STEP positions (16-position blocks); a unit is a run of steps of one image (the launcher cuts an image into
// units only when the batch has too few images for the splits), a split a run of units.
// Per warp (one channel) the sequences sit in circular buffers of BUF = 4 STEP positions:
// - the input twice, as in the 2-D kernels (copy 1 one element back: every (kx, j..j+1) pair of an A fragment is
//   one aligned 32-bit load); a step writes positions j0 + 16 .. j0 + STEP + 15 and reads j0 .. j0 + STEP + 14;
// - grad_output once, its 8-element chunks swizzled (seq_slot) so that the eight ldmatrix rows of a B fragment,
//   16 positions apart, hit eight bank groups; a step writes j0 .. j0 + STEP - 1 and reads j0 - 112 .. j0 + STEP - 1.
// A step's writes never alias what the previous step reads (the distances stay under 2 STEP + 112 < BUF), so one
// barrier a step (after the writes) is enough, as for the 2-D kernels' ring. A unit's prologue stages the SEQ_BACK
// grad_output positions before its first step (zeros before the image) and the first 16 input positions, after a
// barrier (the previous unit's steps may still read).
// STEP: 64 or 128 positions (kernels _seq and _seq_s128): a longer step has each lane's loads for twice the
// positions in flight at once.
#define SEQ_BACK 128
// Copy 1 of the staged input starts SEQ_COPY1 = BUF + 32 elements in (16 words past a multiple of the 32 banks), so
// that the odd-g lanes' A loads from copy 1 and the even-g lanes' from copy 0 fall in different banks (at BUF they
// were a 2-way conflict on every A load; the 2-D kernels' COPY_LEN 160 does the same).
#define SEQ_COPY1(BUF) ((BUF) + 32)

template <int BUF>
__device__ __forceinline__ int seq_slot(int pos) {
    const int i = pos & (BUF - 1);
    return i ^ (((i >> 6) & 1) << 3);
}

template <int BUF>
__device__ __forceinline__ void seq_put_x(elem_t* xs, int m, elem_t v) {
    xs[m & (BUF - 1)] = v;
    xs[SEQ_COPY1(BUF) + ((m - 1) & (BUF - 1))] = v;
}

__device__ __forceinline__ elem_t seq_x(const elem_t* xn, int m, int P, int L, long long sxw) {
    const int i = m - P;
    return (unsigned)i < (unsigned)L ? xn[i * sxw] : (elem_t)0;
}

__device__ __forceinline__ elem_t seq_dy(const elem_t* dyn, int o, int LO, long long sdw) {
    return (unsigned)o < (unsigned)LO ? dyn[o * sdw] : (elem_t)0;
}

__device__ __forceinline__ void ldsm_x2(u32& r0, u32& r1, const elem_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}

// One step of one warp: D[kx, ky] += A[kx, j] B[j, ky] over the STEP / 16 blocks of 16 positions from j0.
template <int STEP, int BUF>
__device__ __forceinline__ void seq_mma_step(float (&acc)[4], const elem_t* xs, const elem_t* ds, int j0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    // A[kx = g + 8 h, j = 2t, 2t + 1] = Xpad[jb + 2t + g + 8h ..]: the pair starts on an odd position where g is
    // odd, so copy 1 holds it aligned, one element back; a1 and a2 are one pair (A[kx + 8, j] = A[kx, j + 8])
    const int odd = g & 1;
    const elem_t* copy = xs + odd * SEQ_COPY1(BUF);
    const int a_pos = 2 * t + g - odd;
    // ldmatrix.x2 rows (lanes 0-15; 16-31 repeat them): matrix lane / 8 holds positions jb + 8 (lane / 8) .. + 7 of
    // B column ky = lane % 8, i.e. grad_output positions jb + 8 (lane / 8) - 16 ky
    const int lm_pos = ((lane >> 3) & 1) * 8 - 16 * (lane & 7);
#pragma unroll
    for (int cb = 0; cb < STEP / 16; ++cb) {
        const int jb = j0 + 16 * cb;
        const u32 a0 = lds32(copy + ((jb + a_pos) & (BUF - 1)));
        const u32 a1 = lds32(copy + ((jb + a_pos + 8) & (BUF - 1)));
        const u32 a3 = lds32(copy + ((jb + a_pos + 16) & (BUF - 1)));
        u32 b0, b1;
        ldsm_x2(b0, b1, ds + seq_slot<BUF>(jb + lm_pos));
        mma16816(acc, a0, a1, a1, a3, b0, b1);
    }
}

// The warp's fp32 partial of channel c: part[split, c, k] for k = kx + 16 ky < K.
__device__ __forceinline__ void seq_store_partial(const float (&acc)[4], float* __restrict__ part, int split, int C,
                                                  int c, int K, int lane) {
    const int g = lane >> 2, t = lane & 3;
    float* out = part + ((long long)split * C + c) * K;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int k = g + 8 * (e >> 1) + 16 * (2 * t + (e & 1));
        if (k < K) out[k] = acc[e];
    }
}

#define SEQ_PARAMS                                                                                                \
    const elem_t* __restrict__ x, const elem_t* __restrict__ dy, float* __restrict__ part, int N, int C, int L,  \
    int LO, int K, int P, int steps_per_image, int steps_per_unit, int units_per_split, long long sxn,           \
    long long sxc, long long sxw, long long sdn, long long sdc, long long sdw
#define SEQ_ARGS x, dy, part, N, C, L, LO, K, P, steps_per_image, steps_per_unit, units_per_split, sxn, sxc, sxw, \
    sdn, sdc, sdw

// Any strides: each warp loads its own channel (2-byte loads, STEP / 32 of each operand a lane a step), no CTA
// barrier.
template <int STEP>
__device__ __forceinline__ void seq_any_strides(SEQ_PARAMS) {
    constexpr int BUF = 4 * STEP, PER_LANE = STEP / 32;
    __shared__ __align__(16) elem_t xs_all[WARPS][SEQ_COPY1(BUF) + BUF];
    __shared__ __align__(16) elem_t ds_all[WARPS][BUF];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.x * WARPS + warp, split = blockIdx.y;
    if (c >= C) return;   // whole warps only: no CTA barrier follows
    elem_t* xs = xs_all[warp];
    elem_t* ds = ds_all[warp];
    const int units_per_image = (steps_per_image + steps_per_unit - 1) / steps_per_unit;
    const long long u_begin = (long long)split * units_per_split;
    const long long u_end = min((long long)N * units_per_image, u_begin + units_per_split);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (long long u = u_begin; u < u_end; ++u) {
        const int n = (int)(u / units_per_image), s_begin = (int)(u % units_per_image) * steps_per_unit;
        const int s_end = min(steps_per_image, s_begin + steps_per_unit);
        const elem_t* xn = x + n * sxn + c * sxc;
        const elem_t* dyn = dy + n * sdn + c * sdc;
        int j0 = s_begin * STEP;
        __syncwarp();   // the previous unit's steps are done with the buffers
        for (int i = lane; i < SEQ_BACK; i += 32) {
            const int o = j0 - SEQ_BACK + i;
            ds[seq_slot<BUF>(o)] = seq_dy(dyn, o, LO, sdw);
        }
        if (lane < 16) seq_put_x<BUF>(xs, j0 + lane, seq_x(xn, j0 + lane, P, L, sxw));
        // this step's positions a lane: input j0 + 16 + lane + 32 i, grad_output j0 + lane + 32 i
        elem_t xv[PER_LANE], dv[PER_LANE];
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            xv[i] = seq_x(xn, j0 + 16 + lane + 32 * i, P, L, sxw);
            dv[i] = seq_dy(dyn, j0 + lane + 32 * i, LO, sdw);
        }
        for (int s = s_begin; s < s_end; ++s, j0 += STEP) {
#pragma unroll
            for (int i = 0; i < PER_LANE; ++i) {
                seq_put_x<BUF>(xs, j0 + 16 + lane + 32 * i, xv[i]);
                ds[seq_slot<BUF>(j0 + lane + 32 * i)] = dv[i];
            }
            if (s + 1 < s_end) {   // prefetch the next step's while this one's MMAs run
                const int j1 = j0 + STEP;
#pragma unroll
                for (int i = 0; i < PER_LANE; ++i) {
                    xv[i] = seq_x(xn, j1 + 16 + lane + 32 * i, P, L, sxw);
                    dv[i] = seq_dy(dyn, j1 + lane + 32 * i, LO, sdw);
                }
            }
            __syncwarp();
            seq_mma_step<STEP, BUF>(acc, xs, ds, j0, lane);
        }
    }
    seq_store_partial(acc, part, split, C, c, K, lane);
}

// Channels_last with cooperative loads, as cooperative_channels_last: the CTA's CH warps own CH adjacent channels,
// one CH * 2-byte vector load a position brings a position to all of them (threads 0-63: the step's input
// positions, 64-127: its grad_output positions, STEP / 64 each), one CTA barrier a step publishes them. Launcher's
// conditions: channel stride 1 in both operands, C and the n and position strides multiples of CH, pointers
// aligned to the vector.
template <int CH, int STEP>
__device__ __forceinline__ void seq_cooperative_channels_last(SEQ_PARAMS) {
    typedef typename ChannelVector<CH>::type vec_t;
    union Channels { vec_t v; elem_t e[CH]; };
    constexpr int BUF = 4 * STEP, PER_THREAD = STEP / 64;
    static_assert(32 * CH == 128 && SEQ_BACK == 32 * CH, "64 input and 64 grad_output loaders; the prologue's "
                                                          "SEQ_BACK positions one a thread");
    __shared__ __align__(16) elem_t xs_all[CH][SEQ_COPY1(BUF) + BUF];
    __shared__ __align__(16) elem_t ds_all[CH][BUF];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int c0 = blockIdx.x * CH, split = blockIdx.y;   // every channel of the CTA exists (C % CH == 0)
    const int units_per_image = (steps_per_image + steps_per_unit - 1) / steps_per_unit;
    const long long u_begin = (long long)split * units_per_split;
    const long long u_end = min((long long)N * units_per_image, u_begin + units_per_split);
    const int col = tid & 63;
    const bool x_loader = tid < 64;
    const vec_t zero = {};
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (long long u = u_begin; u < u_end; ++u) {
        const int n = (int)(u / units_per_image), s_begin = (int)(u % units_per_image) * steps_per_unit;
        const int s_end = min(steps_per_image, s_begin + steps_per_unit);
        const elem_t* xn = x + n * sxn + c0;
        const elem_t* dyn = dy + n * sdn + c0;
        int j0 = s_begin * STEP;
        __syncthreads();   // every warp is done with the previous unit's positions
        {   // the prologue: grad_output positions j0 - SEQ_BACK .. j0 - 1 (one a thread), input j0 .. j0 + 15
            const int o = j0 - SEQ_BACK + tid;
            Channels v;
            v.v = (unsigned)o < (unsigned)LO ? *reinterpret_cast<const vec_t*>(dyn + o * sdw) : zero;
#pragma unroll
            for (int k = 0; k < CH; ++k) ds_all[k][seq_slot<BUF>(o)] = v.e[k];
            if (tid < 16) {
                const int i = j0 + tid - P;
                v.v = (unsigned)i < (unsigned)L ? *reinterpret_cast<const vec_t*>(xn + i * sxw) : zero;
#pragma unroll
                for (int k = 0; k < CH; ++k) seq_put_x<BUF>(xs_all[k], j0 + tid, v.e[k]);
            }
        }
        // this thread's positions of the step: input j0 + 16 + col + 64 i, or grad_output j0 + col + 64 i
        Channels v[PER_THREAD];
#pragma unroll
        for (int r = 0; r < PER_THREAD; ++r) {
            const int i = j0 + 16 + col + 64 * r - P, o = j0 + col + 64 * r;
            v[r].v = x_loader ? ((unsigned)i < (unsigned)L ? *reinterpret_cast<const vec_t*>(xn + i * sxw) : zero)
                              : ((unsigned)o < (unsigned)LO ? *reinterpret_cast<const vec_t*>(dyn + o * sdw) : zero);
        }
        for (int s = s_begin; s < s_end; ++s, j0 += STEP) {
#pragma unroll
            for (int r = 0; r < PER_THREAD; ++r) {
                if (x_loader) {
#pragma unroll
                    for (int k = 0; k < CH; ++k) seq_put_x<BUF>(xs_all[k], j0 + 16 + col + 64 * r, v[r].e[k]);
                } else {
#pragma unroll
                    for (int k = 0; k < CH; ++k) ds_all[k][seq_slot<BUF>(j0 + col + 64 * r)] = v[r].e[k];
                }
                v[r].v = zero;
            }
            if (s + 1 < s_end) {
#pragma unroll
                for (int r = 0; r < PER_THREAD; ++r) {
                    const int i = j0 + STEP + 16 + col + 64 * r - P, o = j0 + STEP + col + 64 * r;
                    if (x_loader) {
                        if ((unsigned)i < (unsigned)L) v[r].v = *reinterpret_cast<const vec_t*>(xn + i * sxw);
                    } else if ((unsigned)o < (unsigned)LO) {
                        v[r].v = *reinterpret_cast<const vec_t*>(dyn + o * sdw);
                    }
                }
            }
            __syncthreads();
            seq_mma_step<STEP, BUF>(acc, xs_all[warp], ds_all[warp], j0, lane);
        }
    }
    seq_store_partial(acc, part, split, C, c0 + warp, K, lane);
}

// The kernels, by name: wgrad_shifted_mma_seq[_cl4][_s128]_kernel (launcher._sequence_kernel_name).
#define SEQUENCE_KERNELS(SUFFIX, STEP)                                                                            \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) wgrad_shifted_mma_seq##SUFFIX##_kernel(SEQ_PARAMS) {  \
        seq_any_strides<STEP>(SEQ_ARGS);                                                                          \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * 4) wgrad_shifted_mma_seq_cl4##SUFFIX##_kernel(SEQ_PARAMS) {  \
        seq_cooperative_channels_last<4, STEP>(SEQ_ARGS);                                                         \
    }
SEQUENCE_KERNELS(, 64)
SEQUENCE_KERNELS(_s128, 128)
