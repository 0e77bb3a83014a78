"""The staged family's kernel (Gluon): input and grad_output rows staged in shared-memory rings by
asynchronous 16-byte copies, the taps unrolled on fp32 registers.

A program (NUM_WARPS warps, one channel a thread, 32 * NUM_WARPS channels) walks its work units,
each a strip of BW output columns of one image over a chunk of ROW_CHUNK output rows. Step s of a
unit (output row oh_lo + s) needs input rows (oh_lo + s) * stride - pad_h + ky, ky < FY, and the
grad_output row: they sit in a ring of input rows ([columns, channels] each) and a ring of
grad_output rows, filled by ``cp.async`` DEPTH steps ahead (group s = the rows step s adds). A step
waits for its group, then reads each staged input column once per filter row from shared memory
(a warp reads 32 consecutive channels: no bank conflict), converts it to fp32 and runs every
(tap, column) FMA it takes part in:

    acc[ky][kx] += x_row[ky][w * stride + kx] * dy[w]      (unrolled, w < BW, kx < FX)

Padding and tails (rows or columns outside the image, the last strip, the channel tail) are
zero-filled by the masked copies, so the FMA loop has no mask; no input row is carried in
registers from one step to the next (the rolling-window prototype's limit, notes/PERF.md).
One fp32 partial a program (its split) in the shared (split, K, taps) workspace, reduced in
order by the shared stage 2.

Triton has no register arrays and Gluon's shared views are sliced by constants, so the body is
generated per (FY, FX, stride, BW, warps, depth, dtype) and loaded from a file. Gluon's names
differ between Triton 3.6 (``async_copy_global_to_shared``, ``thread_barrier``) and 3.9
(``async_load``, ``barrier``): the source uses the installed release's.
"""

from __future__ import annotations

import functools

import triton

from convwgrad.provider.blocks.generated import load_generated

KERNEL_NAME = "_wgrad_staged_kernel"
#: Gluon element types of the dtypes the family stages, and their bytes (16-byte copies: 8 or 4
#: channels a thread).
GLUON_DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2), "fp32": ("float32", 4)}
COPY_BYTES = 16


#: Per backend: the warp size and the Gluon module of the asynchronous global -> shared copy.
#: gfx950 (CDNA4) has the same commit/wait-group model as NVIDIA's cp.async.
BACKENDS = {
    "cuda": (32, "triton.experimental.gluon.language.nvidia.ampere"),
    "hip": (64, "triton.experimental.gluon.language.amd.cdna4"),
}


def _gluon_names(backend: str) -> tuple[str, str]:
    """(the copy function, the CTA barrier) under the installed Triton's names."""
    import importlib

    from triton.experimental.gluon import language as gl

    async_copy = importlib.import_module(BACKENDS[backend][1] + ".async_copy")
    if backend == "hip":
        copy = "global_load_to_shared"
    else:
        copy = "async_load" if hasattr(async_copy, "async_load") else "async_copy_global_to_shared"
    barrier = "barrier" if hasattr(gl, "barrier") else "thread_barrier"
    return copy, barrier


#: Elements every row and image stride must be a multiple of: Triton specialises an integer
#: argument as "divisible by 16" or not, and its 16-byte copies need the former (a 40-channel bf16
#: row of 17 columns is 16-byte aligned but not 16-element divisible: 2-byte copies, which cp.async
#: refuses). A ``gl.multiple_of`` hint on the strides did not change that (Triton 3.9, offline).
STRIDE_UNIT = 16


_HEAD = """from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from {copy_module} import async_copy


@gluon.jit
def {name}(
    X, DY, OUT,
    H, W, OH, OW, PAD_H, PAD_W,
    C: gl.constexpr,  # a compile-time channel count keeps the channel mask's 16-byte copies
    ROW_CHUNK, CHUNKS, STRIPS, UNITS, UNITS_PER_SPLIT,
    stride_xn, stride_xh, stride_xw: gl.constexpr,
    stride_dyn, stride_dyh, stride_dyw: gl.constexpr,
    stride_os, stride_ok, stride_oy, stride_ox,
):
    # Generated: {fy}x{fx} filter, stride {st}, {dtype}, {bw} output columns a thread, {nw} warps
    # ({cb} channels), copies {depth} steps ahead, rings of {ring} input rows ({cols} columns) and
    # {dring} grad_output rows. See convwgrad/plugins/wgrad_staged/kernels.py.
    # Compute values are [1, channels] (one channel a thread); a column of a staged row is the
    # length-1 view .slice(j, 1) (a second .index is refused: a row's shared layout is 2-D).
    CH: gl.constexpr = gl.BlockedLayout([1, 1], [1, {warp}], [1, {nw}], [1, 0])
    CP: gl.constexpr = gl.BlockedLayout([1, {vec}], [{tpw0}, {tpw1}], [{nw}, 1], [1, 0])
    ROW: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    x_ring = gl.allocate_shared_memory(gl.{gdtype}, [{ring}, {cols}, {cb}], ROW)
    dy_ring = gl.allocate_shared_memory(gl.{gdtype}, [{dring}, {bwp}, {cb}], ROW)

    pid_c = gl.program_id(0)
    split = gl.program_id(1)
    cp_col = gl.arange(0, {cols}, layout=gl.SliceLayout(1, CP))
    cp_dcol = gl.arange(0, {bwp}, layout=gl.SliceLayout(1, CP))
    cp_ch = pid_c * {cb} + gl.arange(0, {cb}, layout=gl.SliceLayout(0, CP))
    cp_ch_ok = cp_ch < C
    chans = (pid_c * {cb} + gl.arange(0, {cb}, layout=gl.SliceLayout(0, CH)))[None, :]
"""


def geometry(fy: int, fx: int, stride: int, bw: int, nw: int, depth: int, dtype: str, warp: int = 32) -> dict:
    """Sizes the generated kernel is built from (powers of two where Gluon allocates them)."""
    _, size = GLUON_DTYPES[dtype]
    span = (bw - 1) * stride + fx           # input columns a strip reads
    vec = COPY_BYTES // size
    cb = warp * nw
    tpw1 = cb // vec
    return dict(span=span, cols=triton.next_power_of_2(span), bwp=triton.next_power_of_2(bw), cb=cb, vec=vec,
                warp=warp, tpw1=tpw1, tpw0=warp // tpw1 if tpw1 <= warp else 0,
                # rows a step reads + the rows DEPTH steps ahead add (stride each)
                ring=triton.next_power_of_2(fy + depth * stride), dring=triton.next_power_of_2(depth + 1))


def shared_bytes(fy: int, fx: int, stride: int, bw: int, nw: int, depth: int, dtype: str, warp: int = 32) -> int:
    g = geometry(fy, fx, stride, bw, nw, depth, dtype, warp)
    return (g["ring"] * g["cols"] + g["dring"] * g["bwp"]) * g["cb"] * GLUON_DTYPES[dtype][1]


def layout_reasons(fy: int, fx: int, stride: int, bw: int, nw: int, depth: int, dtype: str,
                   warp: int = 32) -> list[str]:
    """Why the copy layout cannot cover this tile ([] when it can): a warp's threads must tile the
    channels in 16-byte vectors and the rows of a staged tile without repeating one."""
    g = geometry(fy, fx, stride, bw, nw, depth, dtype, warp)
    if g["tpw0"] == 0 or g["tpw0"] * g["tpw1"] != warp:
        return [f"{g['cb']} channels a program in {g['vec']}-channel copies is not a whole warp's worth"]
    if g["tpw0"] * nw > min(g["cols"], g["bwp"]):
        return [f"block_n={bw} columns: the copies of {nw} warps cover {g['tpw0'] * nw} staged columns a pass, "
                f"more than the {min(g['cols'], g['bwp'])} a strip stages"]
    return []


def _source(fy: int, fx: int, stride: int, bw: int, nw: int, depth: int, dtype: str, backend: str = "cuda") -> str:
    warp, copy_module = BACKENDS[backend]
    g = geometry(fy, fx, stride, bw, nw, depth, dtype, warp)
    span, ring, dring, st = g["span"], g["ring"], g["dring"], stride
    copy, barrier = _gluon_names(backend)
    p, q, b = " " * 4, " " * 8, " " * 12
    lines = [_HEAD.format(name=KERNEL_NAME, fy=fy, fx=fx, st=st, dtype=dtype, gdtype=GLUON_DTYPES[dtype][0], bw=bw,
                          nw=nw, depth=depth, copy_module=copy_module,
                          **{k: g[k] for k in ("cb", "ring", "cols", "dring", "bwp", "vec", "tpw0", "tpw1", "warp")})]
    lines += [f"{p}acc_{ky}_{kx} = gl.zeros([1, {g['cb']}], gl.float32, layout=CH)"
              for ky in range(fy) for kx in range(fx)]
    lines += [
        f"{p}u_lo = split * UNITS_PER_SPLIT",
        f"{p}u_hi = gl.minimum(u_lo + UNITS_PER_SPLIT, UNITS)",
        f"{p}for u in range(u_lo, u_hi):",
        f"{q}strip = u % STRIPS",
        f"{q}rest = u // STRIPS",
        f"{q}chunk = rest % CHUNKS",
        f"{q}n = (rest // CHUNKS).to(gl.int64)",
        f"{q}ow0 = strip * {bw}",
        f"{q}ix0 = ow0 * {st} - PAD_W",
        f"{q}oh_lo = chunk * ROW_CHUNK",
        f"{q}steps = gl.minimum(ROW_CHUNK, OH - oh_lo)",
        f"{q}iy0 = oh_lo * {st} - PAD_H",
        # the strip's staged columns: inside the image and the window (zero-filled otherwise)
        f"{q}x_cols_ok = (ix0 + cp_col >= 0) & (ix0 + cp_col < W) & (cp_col < {span})",
        f"{q}x_tile = X + n * stride_xn + (ix0 + cp_col)[:, None] * stride_xw + cp_ch[None, :]",
        f"{q}x_tile_ok = x_cols_ok[:, None] & cp_ch_ok[None, :]",
        f"{q}dy_cols_ok = (ow0 + cp_dcol < OW) & (cp_dcol < {bw})",
        f"{q}dy_tile = DY + n * stride_dyn + (ow0 + cp_dcol)[:, None] * stride_dyw + cp_ch[None, :]",
        f"{q}dy_tile_ok = dy_cols_ok[:, None] & cp_ch_ok[None, :]",
    ]

    def copy_x_row(indent, rel, extra_ok):
        """Input row iy0 + rel (rel: a relative row expression) into ring slot rel % ring."""
        return [
            f"{indent}iy = iy0 + ({rel})",
            f"{indent}row_ok = (iy >= 0) & (iy < H){extra_ok}",
            f"{indent}async_copy.{copy}(x_ring.index(({rel}) % {ring}), x_tile + iy * stride_xh, "
            f"mask=x_tile_ok & row_ok)",
        ]

    def copy_dy_row(indent, step, extra_ok):
        return [f"{indent}async_copy.{copy}(dy_ring.index(({step}) % {dring}), dy_tile + (oh_lo + ({step})) * "
                f"stride_dyh, mask=dy_tile_ok & ({extra_ok}))"]

    # Group 0: the first step's fy input rows and its grad_output row; group g < depth: the st rows
    # step g adds (fy + (g - 1) * st, ...) and grad_output row g, empty past the chunk.
    for rel in range(fy):
        lines += copy_x_row(q, str(rel), "")
    lines += copy_dy_row(q, "0", "steps > 0")
    lines.append(f"{q}async_copy.commit_group()")
    for group in range(1, depth):
        for i in range(st):
            lines += copy_x_row(q, str(fy + (group - 1) * st + i), f" & ({group} < steps)")
        lines += copy_dy_row(q, str(group), f"{group} < steps")
        lines.append(f"{q}async_copy.commit_group()")
    lines += [
        f"{q}for s in range(0, steps):",
        # group s has landed (depth - 1 younger groups may still fly) and every thread's copies
        # are visible; group s + depth then reuses slots only steps before s read
        f"{b}async_copy.wait_group({depth - 1})",
        f"{b}gl.{barrier}()",
    ]
    for i in range(st):
        lines += copy_x_row(b, f"(s + {depth}) * {st} + {fy - st + i}", f" & (s + {depth} < steps)")
    lines += copy_dy_row(b, f"s + {depth}", f"s + {depth} < steps")
    lines.append(f"{b}async_copy.commit_group()")
    lines.append(f"{b}dy_row = dy_ring.index(s % {dring})")
    for w in range(bw):
        lines.append(f"{b}dv_{w} = dy_row.slice({w}, 1).load(CH).to(gl.float32)")
    for ky in range(fy):
        lines.append(f"{b}x_row = x_ring.index((s * {st} + {ky}) % {ring})")
        for j in range(span):
            uses = [(w, kx) for kx in range(fx) for w in range(bw) if w * st + kx == j]
            if uses:
                lines.append(f"{b}v = x_row.slice({j}, 1).load(CH).to(gl.float32)")
                lines += [f"{b}acc_{ky}_{kx} += v * dv_{w}" for w, kx in uses]
    # drain: the masked groups past the chunk still write (zeros) into the rings
    lines += [f"{q}async_copy.wait_group(0)", f"{q}gl.{barrier}()"]
    lines.append(f"{p}out = OUT + split.to(gl.int64) * stride_os + chans * stride_ok")
    for ky in range(fy):
        for kx in range(fx):
            lines.append(f"{p}gl.store(out + ({ky} * stride_oy + {kx} * stride_ox), "
                         f"acc_{ky}_{kx}.to(OUT.dtype.element_ty), mask=chans < C)")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=None)
def staged_kernel(fy: int, fx: int, stride: int, bw: int, nw: int, depth: int, dtype: str, backend: str = "cuda"):
    """The generated Gluon kernel for this filter, stride, tile, dtype and backend."""
    return load_generated(_source(fy, fx, stride, bw, nw, depth, dtype, backend), "convwgrad_staged", KERNEL_NAME)
