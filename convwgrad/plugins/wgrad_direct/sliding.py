"""The direct family's second kernel: the sliding window, generated per filter (taps unrolled).

The tile kernel (:mod:`.kernels`) converts and multiplies one input element per (tap, channel,
column): every tap reloads (from L1) and re-converts the element its neighbour tap already had.
This kernel holds every tap's accumulator as its own [BLOCK_C] fp32 tensor and, per step of
BLOCK_W output columns and per filter row, loads each input column the step needs ONCE
(``BLOCK_W*stride + (FX-1)*dilation`` of them at most, the distinct offsets ``w*stride + kx*dil``)
and converts it once; then every (tap, column) pair is one FMA on registers:

    acc[kz][ky][kx] += x_col[w*stride + kx*dil] * dy[w]      (unrolled, w < BLOCK_W, kx < FX)

For a 7x7 filter at BLOCK_W = 8 that is 14 loads and conversions per filter row for 56 FMAs,
where the tile kernel spends 56 of each. Masks are scalars (a filter row, an input column, an
output column) next to the channel tail's vector mask; interior segments of interior rows have
none. Triton has no register arrays, so the unrolled body is generated as source for each
(FZ, FY, FX, stride_w, dilation_w, BLOCK_W, channel tail) and loaded from a file, as a Triton
kernel must be (its source is read back by the JIT).

Same arguments, grid, split and workspace as the tile kernel (its launcher builds both); the
arguments the generated code has baked in (FZ, FY, FX, STRIDE_W, DIL_W) are accepted and unused.
"""

from __future__ import annotations

import functools

from convwgrad.provider.blocks.generated import load_generated

KERNEL_NAME = "_wgrad_direct_sliding_kernel"

_SIGNATURE = '''
@triton.jit
def {name}(
    X, DY, OUT,
    D, H, W, OD, OH, OW, FZ, FY, FX,
    STRIDE_D, STRIDE_H, STRIDE_W, PAD_D, PAD_H, PAD_W, DIL_D, DIL_H, DIL_W,
    TAPS, C_OUT, KPG, COL_BLOCKS, STEPS, STEPS_PER_SPLIT, COL_INNER_LO, COL_INNER_HI,
    stride_xn, stride_xc, stride_xd, stride_xh, stride_xw,
    stride_dyn, stride_dyc, stride_dyd, stride_dyh, stride_dyw,
    stride_os, stride_ok, stride_oz, stride_oy, stride_ox,
    BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr,
    HAS_CHANNEL_TAIL: tl.constexpr, IS_ONE_COL_BLOCK: tl.constexpr, IS_WIDE_INDEX: tl.constexpr,
):
    # Generated for filter {fz}x{fy}x{fx}, stride_w {sw}, dilation_w {dw}, {bw} columns a step,
    # channel tail {tail}: see convwgrad/plugins/wgrad_direct/sliding.py.
    pid_c = tl.program_id(0)
    split = tl.program_id(1)
    chans = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_ok = chans < C_OUT
    x_chans = chans // KPG
    if IS_WIDE_INDEX:
        chans = chans.to(tl.int64)
        x_chans = x_chans.to(tl.int64)
    x_ptrs0 = X + x_chans * stride_xc
    dy_ptrs0 = DY + chans * stride_dyc
    # A 0 derived from the program id: loop counters plus ZERO are tensors in the interpreter too
    # (there a range() counter is a Python int, and a mask of a Python bool is refused).
    ZERO = split * 0
'''

_ROWS = '''
    step_lo = split * STEPS_PER_SPLIT
    step_hi = tl.minimum(step_lo + STEPS_PER_SPLIT, STEPS)
    for row_counter in range(step_lo // COL_BLOCKS, tl.cdiv(step_hi, COL_BLOCKS)):
        row = row_counter + ZERO
        oh = row % OH
        rest = row // OH
        od = rest % OD
        n = rest // OD
        if IS_WIDE_INDEX:
            n = n.to(tl.int64)
            od = od.to(tl.int64)
            oh = oh.to(tl.int64)
        iz0 = od * STRIDE_D - PAD_D
        iy0 = oh * STRIDE_H - PAD_H
        x_row = n * stride_xn + iz0 * stride_xd + iy0 * stride_xh
        dy_row = n * stride_dyn + od * stride_dyd + oh * stride_dyh
        first = row * COL_BLOCKS
        b_lo = tl.maximum(step_lo - first, 0)
        b_hi = tl.minimum(step_hi - first, COL_BLOCKS)
        row_inside = (iz0 >= 0) & (iz0 + {span_z} < D) & (iy0 >= 0) & (iy0 + {span_y} < H)
        inner_lo = tl.minimum(b_hi, tl.maximum(b_lo, COL_INNER_LO))
        inner_hi = tl.maximum(inner_lo, tl.minimum(b_hi, COL_INNER_HI))
        if not row_inside:  # every segment of this row takes the masked body
            inner_lo = b_hi
            inner_hi = b_hi
        for b in range(inner_lo, inner_hi):
            ow0 = (b + ZERO) * BLOCK_W
            if IS_WIDE_INDEX:
                ow0 = ow0.to(tl.int64)
            ix0 = ow0 * {sw} - PAD_W
{unmasked}
        n_left = inner_lo - b_lo
        for i in range(0, n_left + (b_hi - inner_hi)):
            b = b_lo + i + ((i + ZERO) >= n_left).to(tl.int32) * (inner_hi - inner_lo)
            ow0 = b * BLOCK_W
            if IS_WIDE_INDEX:
                ow0 = ow0.to(tl.int64)
            ix0 = ow0 * {sw} - PAD_W
{masked}
'''


def _source(fz: int, fy: int, fx: int, sw: int, dw: int, bw: int, tail: bool) -> str:
    taps = [(z, y, x) for z in range(fz) for y in range(fy) for x in range(fx)]
    offsets = sorted({w * sw + kx * dw for w in range(bw) for kx in range(fx)})
    lines = [_SIGNATURE.format(name=KERNEL_NAME, fz=fz, fy=fy, fx=fx, sw=sw, dw=dw, bw=bw, tail=tail)]
    for z in range(fz):
        for y in range(fy):
            lines.append(f"    zy_{z}_{y} = {z} * DIL_D * stride_xd + {y} * DIL_H * stride_xh")
    for z, y, x in taps:
        lines.append(f"    acc_{z}_{y}_{x} = tl.zeros((BLOCK_C,), dtype=tl.float32)")

    def body(masked: bool) -> str:
        pad = " " * 12
        out = []
        # The masked body always selects the channel mask by the scalar conditions (the
        # interpreter refuses a mask of scalars alone, and `vector & scalar` there is an int);
        # the unmasked body masks only a channel tail.
        chan = "chan_ok" if tail or masked else None
        for w in range(bw):
            if masked:
                mask = f"tl.where(ow0 + {w} < OW, {chan}, False)"
                out.append(f"{pad}dv_{w} = tl.load(dy_ptrs0 + (dy_row + (ow0 + {w}) * stride_dyw), "
                           f"mask={mask}, other=0.0).to(tl.float32)")
            elif chan:
                out.append(f"{pad}dv_{w} = tl.load(dy_ptrs0 + (dy_row + (ow0 + {w}) * stride_dyw), "
                           f"mask={chan}, other=0.0).to(tl.float32)")
            else:
                out.append(f"{pad}dv_{w} = tl.load(dy_ptrs0 + (dy_row + (ow0 + {w}) * stride_dyw)).to(tl.float32)")
        if masked:
            for o in offsets:
                out.append(f"{pad}cx_{o} = (ix0 + {o} >= 0) & (ix0 + {o} < W)")
        for z in range(fz):
            for y in range(fy):
                if masked:
                    out.append(f"{pad}rv = (iz0 + {z} * DIL_D >= 0) & (iz0 + {z} * DIL_D < D) & "
                               f"(iy0 + {y} * DIL_H >= 0) & (iy0 + {y} * DIL_H < H)")
                base = f"x_ptrs0 + (x_row + zy_{z}_{y} + ix0 * stride_xw)"
                for o in offsets:
                    ptr = f"{base} + {o} * stride_xw"
                    if masked:
                        mask = f"tl.where(rv & cx_{o}, {chan}, False)"
                        out.append(f"{pad}xv_{o} = tl.load({ptr}, mask={mask}, other=0.0).to(tl.float32)")
                    elif chan:
                        out.append(f"{pad}xv_{o} = tl.load({ptr}, mask={chan}, other=0.0).to(tl.float32)")
                    else:
                        out.append(f"{pad}xv_{o} = tl.load({ptr}).to(tl.float32)")
                for x in range(fx):
                    for w in range(bw):
                        out.append(f"{pad}acc_{z}_{y}_{x} += xv_{w * sw + x * dw} * dv_{w}")
        return "\n".join(out)

    lines.append(_ROWS.format(span_z=f"{fz - 1} * DIL_D", span_y=f"{fy - 1} * DIL_H", sw=sw,
                              unmasked=body(False), masked=body(True)))
    store_mask = "chan_ok" if tail else "None"
    lines.append("    out_ptrs = OUT + split.to(tl.int64) * stride_os + chans * stride_ok")
    for z, y, x in taps:
        lines.append(f"    tl.store(out_ptrs + ({z} * stride_oz + {y} * stride_oy + {x} * stride_ox), "
                     f"acc_{z}_{y}_{x}.to(OUT.dtype.element_ty), mask={store_mask})")
    return "import triton\nimport triton.language as tl\n\n" + "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def sliding_kernel(fz: int, fy: int, fx: int, stride_w: int, dilation_w: int, block_w: int, channel_tail: bool):
    """The generated kernel for this filter and step, written once to a file and imported."""
    return load_generated(_source(fz, fy, fx, stride_w, dilation_w, block_w, channel_tail),
                          "convwgrad_direct_sliding", KERNEL_NAME)
