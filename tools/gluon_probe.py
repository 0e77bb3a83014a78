"""Gluon probe: stage a 1-D bf16 row segment in shared memory once, build a Hankel operand
A[r, c] = seg[r + c] from it, and feed one tensor-core MMA; compile offline (no GPU) and count
what the ISA does.

By default nothing is launched: every variant only compiles, for sm_90 (PTX + cubin) and, where the
variant is not NVIDIA-only, for gfx950 (``--run``, below, launches them on a GPU). Run it with either Triton:

    . .venv/bin/activate && python tools/gluon_probe.py            # Triton 3.9 (this venv)
    /path/to/triton36-venv/bin/python tools/gluon_probe.py         # Triton 3.6 (no torch needed)

Options: ``--variant NAME`` (repeatable) picks variants, ``--target sm_90|gfx950`` picks a target,
``--dump DIR`` writes each compiled variant's ttgir/ptx/amdgcn there.

``--run`` (needs torch; imported only in this mode) instead launches every variant that the installed
Triton supports on the local CUDA GPU (sm_80+ for mma_v2, sm_90 for wgmma; the expected failures
are skipped) on fresh random bf16 inputs, into a NaN-poisoned output with a NaN guard after it, and
compares with a float64 torch reference (see ``reference``). Before that it runs a CPU self-check of
the reference against a plain-torch replay of the kernels' index math. Without a GPU it says so and
exits 0; with one it exits 1 if any launched variant is wrong.

Variants (M x K Hankel A[r, c] = x[r + c + q*K], K x N second operand B, fp32 result M x N,
two K steps q = 0, 1):

* ``slice_unaligned``  the direct idea, ``seg_smem.slice(3, K)``: a 1-D shared sub-view at an
  element offset that is not a multiple of the slice length. Expected to FAIL in both versions:
  ttg.memdesc_subslice requires offset % length == 0 ("The split offset may not touch the tile").
* ``gather_mma_v2``    A read from the one 1-D segment buffer straight into mma_v2 operand registers
  with ``shared_memory_descriptor.gather`` (Triton >= 3.9 only). B: tile-aligned row blocks
  ``dy_smem.slice(q*K, K, dim=0)`` of a staged [ROWS, N] buffer, loaded with ldmatrix.
* ``gather_wgmma``     the same gather into a wgmma register-A operand (k_width 2); B a shared
  descriptor (Triton >= 3.9 only).
* ``reggather_mma_v2`` A by the register gather ``gl.gather(seg, r + c, 0)`` of the segment held
  in registers (3.6 and 3.9): the compiler stages it through its own shared scratch.
* ``copies_mma_v2``    M pre-shifted copies copies[s, t] = x[s + t] staged once, so each Hankel
  tile is the tile-aligned view ``copies.slice(q*K, K, dim=1)`` (ldmatrix) -- 3.6 and 3.9.
* ``copies_wgmma``     the same, both operands as shared descriptors to ``warpgroup_mma``.
* ``gather_mfma`` / ``copies_mfma``  the gfx950 versions (AMDMFMALayout version 4, amd.cdna3.mfma).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import traceback

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

try:  # exported from 3.9 on; present (unexported) in 3.6
    from triton.experimental.gluon._runtime import GluonASTSource
except ImportError:  # pragma: no cover
    GluonASTSource = None

from triton.experimental.gluon.language.nvidia import ampere, hopper

try:
    from triton.experimental.gluon.language.amd import AMDMFMALayout, cdna3 as amd_cdna3
except ImportError:  # pragma: no cover
    AMDMFMALayout = amd_cdna3 = None

# Renamed between releases: 3.6 has gl.thread_barrier, 3.9 gl.barrier (thread_barrier is gone).
_barrier = getattr(gl, "barrier", None) or getattr(gl, "thread_barrier")

M = 64  # Hankel rows (kx); one warpgroup's wgmma M
K = 16  # reduction (j) per MMA
N = 16  # second operand's columns (ky)
SEG = 128  # staged segment length (power of two for the register tensor); >= M + 2*K - 1 is read
ROWS = 64  # staged DY rows: the second operand is a K-row block of them
NUM_WARPS = 4


# ------------------------------------------------------------------------------------------ helpers
@gluon.jit
def _stage_segment(x_ptr, SEG: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr):
    """Global -> registers -> one 1-D shared buffer, once."""
    seg_layout: gl.constexpr = gl.BlockedLayout([1], [THREADS], [NUM_WARPS], [0])
    offs = gl.arange(0, SEG, layout=seg_layout)
    seg = gl.load(x_ptr + offs)
    flat_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    return gl.allocate_shared_memory(gl.bfloat16, [SEG], flat_layout, seg)


@gluon.jit
def _stage_dy(dy_ptr, ROWS: gl.constexpr, N: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr, dy_layout: gl.constexpr):
    """A [ROWS, N] block of grad-output rows, global -> shared once (16-byte loads)."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [THREADS // 2, 2], [NUM_WARPS, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, ld))
    tile = gl.load(dy_ptr + rows[:, None] * N + cols[None, :])
    return gl.allocate_shared_memory(gl.bfloat16, [ROWS, N], dy_layout, tile)


@gluon.jit
def _stage_shifted_copies(x_ptr, M: gl.constexpr, SEG: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                          copies_layout: gl.constexpr):
    """copies[s, t] = x[s + t] for s < M, t < SEG: M pre-shifted copies of the row segment, so that
    the Hankel tile A[s, c] = x[s + q*K + c] is the tile-aligned view copies[:, q*K : q*K + K].
    Built from global here (row s starts at element s: 2-byte loads, but once per staged block)."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [THREADS // 8, 8], [NUM_WARPS, 1], [1, 0])
    s = gl.arange(0, M, layout=gl.SliceLayout(1, ld))
    t = gl.arange(0, SEG, layout=gl.SliceLayout(0, ld))
    tile = gl.load(x_ptr + s[:, None] + t[None, :])
    return gl.allocate_shared_memory(gl.bfloat16, [M, SEG], copies_layout, tile)


@gluon.jit
def _store_result(out_ptr, acc, M: gl.constexpr, N: gl.constexpr, layout: gl.constexpr):
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    gl.store(out_ptr + rows[:, None] * N + cols[None, :], acc)


@gluon.constexpr_function
def _flattened(layout2d, K):
    """The 1-D linear layout over M*K elements whose reshape to [M, K] is ``layout2d``: each basis
    (r, c) of the 2-D layout becomes r*K + c (K a power of two, so this is bit concatenation)."""
    flat = lambda bases: [[b[0] * K + b[1]] for b in bases]
    return gl.DistributedLinearLayout(reg_bases=flat(layout2d.reg_bases), lane_bases=flat(layout2d.lane_bases),
                                      warp_bases=flat(layout2d.warp_bases), block_bases=flat(layout2d.block_bases),
                                      shape=[layout2d.shape[0] * layout2d.shape[1]])


@gluon.jit
def _hankel_gather(seg_smem, op_layout: gl.constexpr, M: gl.constexpr, K: gl.constexpr, OFF: gl.constexpr):
    """A[r, c] = seg[OFF + r + c], read from the 1-D shared buffer straight into ``op_layout``
    registers with shared_memory_descriptor.gather (Triton >= 3.9)."""
    flat: gl.constexpr = _flattened(gl.to_linear_layout(op_layout, [M, K]), K)
    t = gl.arange(0, M * K, layout=flat)
    a = seg_smem.gather(OFF + t // K + t % K, axis=0)
    return gl.convert_layout(gl.reshape(a, [M, K]), op_layout, assert_trivial=True)


# ------------------------------------------------------------------------------------------ variants
@gluon.jit
def slice_unaligned(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr,
                    SEG: gl.constexpr, ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """The direct idea: a 1-D sub-view of the segment at element offset 3. Expected to be refused
    by the memdesc_subslice verifier (offset must be a multiple of the slice length)."""
    seg_smem = _stage_segment(x_ptr, SEG, NUM_WARPS, THREADS)
    row_layout: gl.constexpr = gl.BlockedLayout([1], [THREADS], [NUM_WARPS], [0])
    row = seg_smem.slice(3, K).load(row_layout)
    gl.store(out_ptr + gl.arange(0, K, layout=row_layout), row.to(gl.float32))


@gluon.jit
def gather_mma_v2(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                  ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """Hankel A read from the one 1-D segment buffer into mma_v2 operand registers by a shared
    gather (two K steps at offsets 0 and K); B = tile-aligned row blocks of the DY buffer."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=KW)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=KW)
    plain: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])

    seg_smem = _stage_segment(x_ptr, SEG, NUM_WARPS, THREADS)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, plain)
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=mma)
    for q in gl.static_range(2):
        a = _hankel_gather(seg_smem, a_op, M, K, q * K)
        b = dy_smem.slice(q * K, K, dim=0).load(b_op)
        acc = ampere.mma_v2(a, b, acc)
    _store_result(out_ptr, acc, M, N, mma)


@gluon.jit
def reggather_mma_v2(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                     ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                     KW: gl.constexpr):
    """Hankel A by the register gather gl.gather(seg, r + c) (present in 3.6 and 3.9): the segment
    is loaded from global into registers once; the compiler lowers a gather whose source is spread
    over warps through a shared-memory scratch buffer of its own."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=KW)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=KW)
    plain: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])
    flat: gl.constexpr = _flattened(gl.to_linear_layout(a_op, [M, K]), K)

    seg_layout: gl.constexpr = gl.BlockedLayout([1], [THREADS], [NUM_WARPS], [0])
    seg = gl.load(x_ptr + gl.arange(0, SEG, layout=seg_layout))
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, plain)
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=mma)
    t = gl.arange(0, M * K, layout=flat)
    for q in gl.static_range(2):
        a = gl.gather(seg, q * K + t // K + t % K, 0)
        a = gl.convert_layout(gl.reshape(a, [M, K]), a_op, assert_trivial=True)
        b = dy_smem.slice(q * K, K, dim=0).load(b_op)
        acc = ampere.mma_v2(a, b, acc)
    _store_result(out_ptr, acc, M, N, mma)


@gluon.jit
def copies_mma_v2(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                  ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """Hankel A as tile-aligned views of M pre-shifted copies: copies.slice(q*K, K, dim=1)."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=KW)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=KW)
    plain: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])

    copies = _stage_shifted_copies(x_ptr, M, SEG, NUM_WARPS, THREADS, plain)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, plain)
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=mma)
    for q in gl.static_range(2):
        a = copies.slice(q * K, K, dim=1).load(a_op)
        b = dy_smem.slice(q * K, K, dim=0).load(b_op)
        acc = ampere.mma_v2(a, b, acc)
    _store_result(out_ptr, acc, M, N, mma)


@gluon.jit
def copies_wgmma(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                 ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """As copies_mma_v2, but both operands go to warpgroup_mma as shared-memory descriptors."""
    wg: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, N, 16])
    nvmma: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)

    copies = _stage_shifted_copies(x_ptr, M, SEG, NUM_WARPS, THREADS, nvmma)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, nvmma)
    hopper.fence_async_shared()  # generic-proxy shared stores -> async-proxy (wgmma) reads
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=wg)
    for q in gl.static_range(2):
        acc = hopper.warpgroup_mma(copies.slice(q * K, K, dim=1), dy_smem.slice(q * K, K, dim=0), acc)
    _store_result(out_ptr, acc, M, N, wg)


@gluon.jit
def gather_wgmma(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                 ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """wgmma with A in registers (DotOperandLayout of the wgmma layout) from a shared gather,
    B a shared descriptor."""
    wg: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, N, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=wg, k_width=KW)
    nvmma: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)

    seg_smem = _stage_segment(x_ptr, SEG, NUM_WARPS, THREADS)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, nvmma)
    hopper.fence_async_shared()
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=wg)
    for q in gl.static_range(2):
        a = _hankel_gather(seg_smem, a_op, M, K, q * K)
        acc = hopper.warpgroup_mma(a, dy_smem.slice(q * K, K, dim=0), acc)
    _store_result(out_ptr, acc, M, N, wg)


@gluon.jit
def copies_mfma(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """copies_mma_v2 for gfx950: AMDMFMALayout(version=4) and amd.cdna3.mfma."""
    mfma: gl.constexpr = AMDMFMALayout(version=4, instr_shape=[16, 16, 16], transposed=True,
                                       warps_per_cta=[NUM_WARPS, 1])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mfma, k_width=KW)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mfma, k_width=KW)
    plain: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])

    copies = _stage_shifted_copies(x_ptr, M, SEG, NUM_WARPS, THREADS, plain)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, plain)
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=mfma)
    for q in gl.static_range(2):
        a = copies.slice(q * K, K, dim=1).load(a_op)
        b = dy_smem.slice(q * K, K, dim=0).load(b_op)
        acc = amd_cdna3.mfma(a, b, acc)
    _store_result(out_ptr, acc, M, N, mfma)


@gluon.jit
def gather_mfma(x_ptr, dy_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr, SEG: gl.constexpr,
                ROWS: gl.constexpr, NUM_WARPS: gl.constexpr, THREADS: gl.constexpr,
                KW: gl.constexpr):
    """gather_mma_v2 for gfx950."""
    mfma: gl.constexpr = AMDMFMALayout(version=4, instr_shape=[16, 16, 16], transposed=True,
                                       warps_per_cta=[NUM_WARPS, 1])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mfma, k_width=KW)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mfma, k_width=KW)
    plain: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 1, [1, 0])

    seg_smem = _stage_segment(x_ptr, SEG, NUM_WARPS, THREADS)
    dy_smem = _stage_dy(dy_ptr, ROWS, N, NUM_WARPS, THREADS, plain)
    _barrier()
    acc = gl.zeros([M, N], gl.float32, layout=mfma)
    for q in gl.static_range(2):
        a = _hankel_gather(seg_smem, a_op, M, K, q * K)
        b = dy_smem.slice(q * K, K, dim=0).load(b_op)
        acc = amd_cdna3.mfma(a, b, acc)
    _store_result(out_ptr, acc, M, N, mfma)


VARIANTS = {  # name -> (kernel, backends it targets)
    "slice_unaligned": (slice_unaligned, ("cuda", "hip")),
    "gather_mma_v2": (gather_mma_v2, ("cuda", )),
    "gather_wgmma": (gather_wgmma, ("cuda", )),
    "reggather_mma_v2": (reggather_mma_v2, ("cuda", )),
    "copies_mma_v2": (copies_mma_v2, ("cuda", )),
    "copies_wgmma": (copies_wgmma, ("cuda", )),
    "gather_mfma": (gather_mfma, ("hip", )),
    "copies_mfma": (copies_mfma, ("hip", )),
}
#: k_width of the register dot operands: bf16 mma.sync / register-A wgmma take 2; gfx950 mfma 16x16x16 takes 4.
KWIDTH = {"cuda": 2, "hip": 4}
#: Variants expected not to compile: the unaligned slice always (that is the finding), the shared
#: gather where the installed Gluon has no shared_memory_descriptor.gather (Triton < 3.9).
EXPECTED_FAIL = {"slice_unaligned"} | (set() if hasattr(gl.shared_memory_descriptor, "gather") else
                                       {"gather_mma_v2", "gather_wgmma", "gather_mfma"})
TARGETS = {"sm_90": GPUTarget("cuda", 90, 32), "gfx950": GPUTarget("hip", "gfx950", 64)}


# ------------------------------------------------------------------------------------------ compile + read
def compile_variant(kernel, target, kw):
    signature = {"x_ptr": "*bf16", "dy_ptr": "*bf16", "out_ptr": "*fp32", "M": "constexpr", "K": "constexpr",
                 "N": "constexpr", "SEG": "constexpr", "ROWS": "constexpr", "NUM_WARPS": "constexpr",
                 "THREADS": "constexpr", "KW": "constexpr"}
    constexprs = {"M": M, "K": K, "N": N, "SEG": SEG, "ROWS": ROWS, "NUM_WARPS": NUM_WARPS,
                  "THREADS": target.warp_size, "KW": kw}
    attrs = {(i, ): [["tt.divisibility", 16]] for i in range(3)}
    src = GluonASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(src, target=target, options={"num_warps": NUM_WARPS})


_PRED = r"^\s*(?:@!?%\w+\s+)?"


def _count(pattern, text):
    return len(re.findall(_PRED + pattern, text, re.M))


def summarize(asm: dict) -> dict:
    if "ptx" in asm:
        ptx = asm["ptx"]
        out = {
            "mma.sync": _count(r"mma\.sync", ptx),
            "wgmma.mma_async": _count(r"wgmma\.mma_async", ptx),
            "ldmatrix": _count(r"ldmatrix", ptx),
            "ld.shared": _count(r"ld\.shared", ptx),
            "ld.shared widths": _widths(re.findall(_PRED + r"ld\.shared((?:\.[\w:]+)*)\s", ptx, re.M)),
            "st.shared": _count(r"st\.shared", ptx),
            "st.shared widths": _widths(re.findall(_PRED + r"st\.shared((?:\.[\w:]+)*)\s", ptx, re.M)),
            "ld.global": _count(r"ld\.global", ptx),
            "ld.global widths": _widths(re.findall(_PRED + r"ld\.global((?:\.[\w:]+)*)\s", ptx, re.M)),
            "bar.sync/barrier": _count(r"(?:bar\.sync|barrier\.sync)", ptx),
            "fence.proxy.async": _count(r"fence\.proxy\.async", ptx),
            "shfl": _count(r"shfl", ptx),
            ".local in ptx": ptx.count(".local"),
        }
        out.update(_cubin_resources(asm.get("cubin")))
        return out
    gcn = asm["amdgcn"]
    scratch = re.search(r"^\s*;\s*ScratchSize:\s*(\d+)", gcn, re.M)
    vgprs = re.search(r"^\s*;\s*NumVgprs:\s*(\d+)", gcn, re.M)
    return {
        "v_mfma": len(re.findall(r"^\s*v_mfma\w*", gcn, re.M)),
        "ds_read": len(re.findall(r"^\s*ds_read\w*", gcn, re.M)),
        "ds_read kinds": _kinds(re.findall(r"^\s*(ds_read\w*)", gcn, re.M)),
        "ds_write": len(re.findall(r"^\s*ds_write\w*", gcn, re.M)),
        "ds_write kinds": _kinds(re.findall(r"^\s*(ds_write\w*)", gcn, re.M)),
        "global_load": len(re.findall(r"^\s*(?:global|buffer)_load\w*", gcn, re.M)),
        "s_barrier": len(re.findall(r"^\s*s_barrier", gcn, re.M)),
        "vgprs": int(vgprs.group(1)) if vgprs else None,
        "scratch bytes": int(scratch.group(1)) if scratch else None,
    }


def _widths(suffix_lists):
    counts = {}
    for suffixes in suffix_lists:
        parts = suffixes.split(".")
        vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
        bits = next((int(p[1:]) for p in reversed(parts) if re.fullmatch(r"[bfsu]\d+", p)), 0)
        counts[f"{vec * bits // 8}B"] = counts.get(f"{vec * bits // 8}B", 0) + 1
    return dict(sorted(counts.items()))


def _kinds(names):
    counts = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return counts


def _cubin_resources(cubin):
    if not cubin:
        return {}
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    reg, stack = (re.search(rf"{k}:(\d+)", out) for k in ("REG", "STACK"))
    return {"registers": int(reg.group(1)) if reg else None, "stack bytes": int(stack.group(1)) if stack else None}


# ------------------------------------------------------------------------------------------ --run (GPU)
#: The K steps every variant accumulates: the kernels' ``for q in gl.static_range(2)`` (offsets 0, K).
KSTEPS = 2
#: Elements of x the kernels may read: the copies variants load x[s + t] for s < M, t < SEG.
X_LEN = M + SEG - 1
#: Elements of NaN guard after the M*N output: they must still be NaN after a launch.
GUARD = 1024
#: Accept if ||out - ref||_F / ||ref||_F and max|out - ref| / max(|A| @ |B|) are both within this.
#: fp32 accumulation of 32 exact bf16 products is good to ~1e-6; a wrong shift or row gives ~1.
RTOL = 1e-4


def reference(x, dy):
    """What every variant computes, in float64 on the CPU, derived from the definition and not from
    the kernels' index code: out[r, n] = sum_{k < KSTEPS*K} A[r, k] * dy[k, n] with the Hankel operand
    A[r, k] = x[r + k] (r < M). Returns (ref, scale) with scale = |A| @ |dy| for the error bound."""
    x64 = x.detach().double().cpu().reshape(-1)
    dy64 = dy.detach().double().cpu().reshape(ROWS, N)[:KSTEPS * K]
    a = x64[:M + KSTEPS * K - 1].unfold(0, KSTEPS * K, 1)  # [M, KSTEPS*K], a[r, k] = x[r + k]
    assert a.shape == (M, KSTEPS * K)
    return a @ dy64, a.abs() @ dy64.abs()


def emulate(kind, x, dy):
    """The kernels' data flow replayed in plain torch (CPU, fp32 accumulation per K step), for the
    self-check of ``reference``. kind "gather": A tile q is seg[q*K + t//K + t%K] reshaped [M, K]
    (``_hankel_gather`` and reggather_mma_v2, seg = x[:SEG]); kind "copies": copies[s, t] = x[s + t]
    and A tile q is copies[:, q*K : q*K + K] (``_stage_shifted_copies`` + slice). B tile q is
    dy[q*K : q*K + K] (``dy_smem.slice(q*K, K, dim=0)``)."""
    import torch
    x = x.reshape(-1)
    dy = dy.reshape(ROWS, N)
    acc = torch.zeros(M, N, dtype=torch.float32)
    t = torch.arange(M * K)
    copies = x[torch.arange(M)[:, None] + torch.arange(SEG)[None, :]]  # [M, SEG]
    for q in range(KSTEPS):
        if kind == "gather":
            a = x[:SEG][q * K + t // K + t % K].reshape(M, K)
        elif kind == "copies":
            a = copies[:, q * K:q * K + K]
        else:
            raise ValueError(kind)
        acc += a.float() @ dy[q * K:q * K + K].float()
    return acc


def check(out, ref, scale):
    """out: the [M, N] result (any device); returns (ok, report dict)."""
    o = out.detach().double().cpu()
    unwritten = int(o.isnan().sum())
    diff = (o - ref).abs()
    rel_fro = float((o - ref).norm() / ref.norm())
    max_err = float(diff.max())
    max_rel = float((diff / scale.max()).max())
    ok = unwritten == 0 and rel_fro <= RTOL and max_rel <= RTOL  # NaN compares False
    return ok, {"max_abs_err": max_err, "max_err/max(|A||B|)": max_rel, "rel_fro": rel_fro,
                "unwritten (NaN left)": unwritten}


def cpu_self_check():
    """The reference against the kernels' index math replayed on the CPU, and two deliberately wrong
    replays (A shifted by one element, B's rows off by one) that must be rejected."""
    import torch
    g = torch.Generator().manual_seed(0)
    x = torch.randn(X_LEN, generator=g).to(torch.bfloat16)
    dy = torch.randn(ROWS, N, generator=g).to(torch.bfloat16)
    ref, scale = reference(x, dy)
    good = True
    for kind in ("gather", "copies"):
        ok, rep = check(emulate(kind, x, dy), ref, scale)
        print(f"[self-check] replay '{kind}' vs float64 reference: {'ok' if ok else 'WRONG'} {_fmt(rep)}")
        good &= ok
    bad_a = emulate("gather", torch.cat([x[1:], x[:1]]), dy)  # A[r, k] = x[r + k + 1]
    bad_b = emulate("gather", x, torch.cat([dy[1:], dy[:1]]))  # B rows shifted by one
    holey = emulate("gather", x, dy)
    holey[5, 7] = float("nan")  # one element the kernel would not have written
    for label, bad in (("A shifted by 1", bad_a), ("B rows shifted by 1", bad_b), ("one NaN left", holey)):
        ok, rep = check(bad, ref, scale)
        print(f"[self-check] deliberately wrong ({label}) is {'ACCEPTED (bad)' if ok else 'rejected (good)'}: {_fmt(rep)}")
        good &= not ok
    return good


def _fmt(rep):
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in rep.items())


def run_on_gpu(names, iters=100):
    """--run: the CPU self-check, then launch each supported variant on the local CUDA GPU."""
    try:
        import torch
    except ImportError as exc:
        print(f"--run needs torch, which is not importable here ({exc}); nothing was run.")
        return 0
    print(f"torch {torch.__version__}, triton {triton.__version__}")
    if not cpu_self_check():
        print("RESULT: the CPU self-check of the reference failed; no GPU run")
        return 1
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        why = "a ROCm build (only the CUDA variants have a run path)" if getattr(torch.version, "hip", None) else \
            "no CUDA GPU visible (torch.cuda.is_available() is False)"
        print(f"RESULT: nothing launched: {why}. The CPU self-check passed; exit 0.")
        return 0
    dev = torch.device("cuda", torch.cuda.current_device())
    cap = torch.cuda.get_device_capability(dev)
    print(f"device {torch.cuda.get_device_name(dev)} (sm_{cap[0]}{cap[1]}); M={M} K={K} N={N} KSTEPS={KSTEPS}; "
          f"tolerance {RTOL:g}")
    wrong = ran = 0
    for name in names:
        kernel, backends = VARIANTS[name]
        skip = ("cuda not a target of this variant" if "cuda" not in backends else
                f"expected not to compile with triton {triton.__version__}" if name in EXPECTED_FAIL else
                "wgmma needs sm_90" if "wgmma" in name and cap != (9, 0) else
                "mma_v2 needs sm_80+" if cap < (8, 0) else None)
        if skip:
            print(f"[skip] {name}: {skip}")
            continue
        ran += 1
        x = torch.randn(X_LEN, device=dev, dtype=torch.bfloat16)  # fresh per variant
        dy = torch.randn(ROWS, N, device=dev, dtype=torch.bfloat16)
        buf = torch.full((M * N + GUARD, ), float("nan"), device=dev, dtype=torch.float32)
        out = buf[:M * N].view(M, N)
        assert x.is_contiguous() and dy.is_contiguous() and dy.stride() == (N, 1) and out.stride() == (N, 1)

        def launch():
            kernel[(1, )](x, dy, buf, M=M, K=K, N=N, SEG=SEG, ROWS=ROWS, NUM_WARPS=NUM_WARPS, THREADS=32,
                          KW=KWIDTH["cuda"], num_warps=NUM_WARPS)

        try:
            launch()
            torch.cuda.synchronize(dev)
        except Exception as exc:
            wrong += 1
            cause = exc.__cause__ or exc
            print(f"[FAIL] {name}: launch raised {type(cause).__name__}: {str(cause).strip().splitlines()[-1:]}")
            continue
        first = out.detach().cpu().clone()
        guard_ok = bool(buf[M * N:].isnan().all())
        ok, rep = check(first, *reference(x, dy))
        ok &= guard_ok
        rep["guard intact"] = guard_ok
        # probe timing: single CTA, launch-bound; says the kernel runs, not how fast a real one is
        for _ in range(5):
            launch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            launch()
        end.record()
        torch.cuda.synchronize(dev)
        us = start.elapsed_time(end) * 1e3 / iters
        same = bool(torch.allclose(out.detach().cpu(), first, rtol=0, atol=0, equal_nan=True))
        ok &= same
        rep["repeat launches identical"] = same
        wrong += not ok
        print(f"[{'ok' if ok else 'WRONG'}] {name}: {_fmt(rep)}; probe timing {us:.1f} us/launch "
              f"(mean of {iters} launches by cuda events, one CTA, includes launch overhead; not a benchmark)")
    print(f"RESULT: {ran} variant(s) launched, {wrong} wrong or failed")
    return 1 if wrong else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--target", action="append", choices=sorted(TARGETS))
    ap.add_argument("--dump", help="folder for each compiled variant's ttgir / ptx / amdgcn")
    ap.add_argument("--traceback", action="store_true", help="print a failing compile's full traceback")
    ap.add_argument("--run", action="store_true",
                    help="launch the supported variants on the local CUDA GPU and check them against a float64 "
                    "reference (needs torch; without a GPU only the CPU self-check runs, exit 0)")
    args = ap.parse_args(argv)
    if args.run:
        return run_on_gpu(args.variant or list(VARIANTS))
    print(f"triton {triton.__version__}; M={M} K={K} N={N} SEG={SEG} num_warps={NUM_WARPS}; "
          f"expected to fail here: {sorted(EXPECTED_FAIL)}")
    failures = 0
    for name in args.variant or list(VARIANTS):
        kernel, backends = VARIANTS[name]
        for tname in args.target or list(TARGETS):
            target = TARGETS[tname]
            if target.backend not in backends:
                continue
            try:
                compiled = compile_variant(kernel, target, KWIDTH[target.backend])
            except Exception as exc:  # report and go on: a failure is a finding
                expected = name in EXPECTED_FAIL
                failures += not expected
                cause = exc.__cause__ or exc
                msg = [m.strip() for m in str(cause).strip().splitlines() if m.strip()]
                print(f"[{'xfail' if expected else 'FAIL'}] {name} {tname}: {type(cause).__name__}: " + " | ".join(msg[-3:])
                      + ("  (the compiler's own diagnostic is printed above)" if "parsing" in str(cause) else ""))
                if args.traceback:
                    traceback.print_exc()
                continue
            summary = summarize(compiled.asm)
            summary["triton shared bytes"] = getattr(compiled.metadata, "shared", None)
            print(f"[ok]   {name} {tname}: {summary}")
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                for key in ("ttgir", "llir", "ptx", "amdgcn"):
                    if key in compiled.asm:
                        with open(os.path.join(args.dump, f"{name}.{tname}.{key}"), "w") as f:
                            f.write(compiled.asm[key])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
