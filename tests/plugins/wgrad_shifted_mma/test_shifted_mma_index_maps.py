"""The shifted-MMA kernels' index maps, simulated on the CPU with NumPy exactly as kernels.cu does them
(its GPU run is tests/plugins/wgrad_shifted_mma/test_shifted_mma_gpu.py): the two staged copies of an
input row (COPY_LEN each, PW to the left, the odd copy one element back), the ring of grad_output rows
(prologue_slot, the slot a step, s0/s1 with the clamped ky and one wrap), the A offsets (DW kx, clamped
kx in the _dilated_cols kernels), the ldmatrix.x4 and mma.m16n8k16 fragment layouts, the 16-column
blocks and both tap tiles. Every shared-memory read and write is checked to stay in its buffer (an A
read in its own copy), and the simulated dW against a direct float64 sum, for dilated and undilated
shapes the gate admits; two shapes just past the gate's dilation bounds fail the simulation."""

import re

import numpy as np
import pytest

import convwgrad
from convwgrad.plugins.wgrad_shifted_mma import launcher
from convwgrad.provider import ConvProblem
from convwgrad.provider.plan import NoCandidateError, clear_plan_cache
from mma_fragments import LANE, G, T, mma16816

FAMILY = "wgrad_shifted_mma"
# the source's constants (kernels.cu)
RING, RING_STRIDE, COPY_LEN = 33, 72, 160
XBUF = 2 * COPY_LEN



class Warp:
    """One warp's shared buffers (zero at the kernel's start, as the kernel clears them) and its
    accumulator fragments acc[lane, mt, nt, e], run over one split's images."""

    def __init__(self, p: ConvProblem, kernel: str):
        (self.KH, self.KW), (self.H, self.W), (self.OH, self.OW) = p.filter_size, p.input_size, p.output_size
        self.PH, self.PW = p.padding[0][0], p.padding[1][0]
        self.DH, self.DW = p.dilation
        self.MT, self.NT = (1, 2) if kernel.endswith("_t16_kernel") else (2, 4)
        self.dilated_cols = "_dilated_cols" in kernel
        # the cooperative kernels' one barrier a row: another warp may write row r + 1 before this
        # warp's step r reads (simulated as always early); the kernel for any strides writes it after
        self.early_writes = "_cl" in kernel
        self.xs = np.zeros(2 * XBUF)
        self.ring = np.zeros(RING * RING_STRIDE)
        self.acc = np.zeros((32, self.MT, self.NT, 4))

    # --- writes, as the kernel's loaders do them (a lane's columns lane and lane + 32)
    def stage_input_row(self, buf, row):
        for w in range(self.W):
            idx = w + self.PW
            assert idx < COPY_LEN, ("input write past copy 0", idx)
            self.xs[buf * XBUF + idx] = row[w]
            if idx >= 1:
                self.xs[buf * XBUF + COPY_LEN + idx - 1] = row[w]

    def write_ring_row(self, slot, row):
        assert 0 <= slot < RING and self.OW <= RING_STRIDE
        self.ring[slot * RING_STRIDE:slot * RING_STRIDE + self.OW] = row

    def grad_output_row(self, dy, r):
        return dy[r] if 0 <= r < self.OH else np.zeros(self.OW)

    # --- kernels.cu's prologue_rows / prologue_slot
    def span(self):
        return self.DH * (self.KH - 1)

    def prologue_rows(self):
        return self.PH + max(0, self.span() - self.PH)

    def prologue_slot(self, i):
        return i if i < self.PH else RING - (self.span() - self.PH) + (i - self.PH)

    # --- reads
    def lds32(self, xb, idx, copy):
        """ld.shared.b32 at element idx of the staged row xb (the pair idx, idx + 1)."""
        assert np.all(idx % 2 == 0), "unaligned 32-bit A load"
        lo, hi = copy * COPY_LEN, (copy + 1) * COPY_LEN
        assert np.all((idx >= lo) & (idx + 1 < hi)), ("A read outside its copy", idx[(idx < lo) | (idx + 1 >= hi)])
        assert np.all((idx >= 0) & (idx + 1 < 2 * COPY_LEN))
        return self.xs[xb + idx], self.xs[xb + idx + 1]

    def ldmatrix_x4(self, addr):
        """ldmatrix.x4: lane l gives row l % 8 of matrix l // 8; thread T gets row T // 4, columns
        2 (T % 4) and + 1 of each matrix, as four registers."""
        assert np.all(addr % 8 == 0), "unaligned ldmatrix row"
        assert np.all((addr >= 0) & (addr + 8 <= RING * RING_STRIDE)), ("ring read out of the ring", addr)
        assert np.all(addr % RING_STRIDE + 8 <= RING_STRIDE)
        regs = []
        for i in range(4):
            row = addr[8 * i + LANE // 4] + 2 * T
            regs.append((self.ring[row], self.ring[row + 1]))
        return regs

    def mma_row(self, xb, slot, col_blocks):
        """kernels.cu's mma_row: A offsets and ring slots a lane, then each 16-column block."""
        KH, KW, DH, DW = self.KH, self.KW, self.DH, self.DW
        a_off, a_copy = {}, {}
        for mt in range(self.MT):
            for h in range(2):
                kx = 16 * mt + G + 8 * h
                shift = DW * np.minimum(kx, KW - 1) if self.dilated_cols else kx
                odd = shift & 1
                a_off[mt, h], a_copy[mt, h] = odd * COPY_LEN + 2 * T + shift - odd, odd
        lm_ky, lm_col = 8 * (LANE >> 4) + (LANE & 7), ((LANE >> 3) & 1) * 8
        s0 = slot - DH * np.minimum(lm_ky, KH - 1)
        s0 = s0 + np.where(s0 < 0, RING, 0)
        s1 = slot - DH * np.minimum(lm_ky + 16, KH - 1)
        s1 = s1 + np.where(s1 < 0, RING, 0)
        assert np.all((s0 >= 0) & (s0 < RING)) and np.all((s1 >= 0) & (s1 < RING)), "a wrap is not enough"
        for cb in range(col_blocks):
            ow0 = cb * 16
            a = {}
            for mt in range(self.MT):
                for h in range(2):
                    base = ow0 + a_off[mt, h]
                    a[mt, h] = self.lds32(xb, base, a_copy[mt, h])
                    a[mt, 2 + h] = self.lds32(xb, base + 8, a_copy[mt, h])
            b = {}
            for q in range(self.NT // 2):
                r0, r1, r2, r3 = self.ldmatrix_x4((s1 if q else s0) * RING_STRIDE + ow0 + lm_col)
                b[2 * q, 0], b[2 * q, 1], b[2 * q + 1, 0], b[2 * q + 1, 1] = r0, r1, r2, r3
            for nt in range(self.NT):
                for mt in range(self.MT):
                    self.mma16816(mt, nt, [a[mt, i] for i in range(4)], [b[nt, 0], b[nt, 1]])

    def mma16816(self, mt, nt, a, b):
        for e, c in enumerate(mma16816(a, b)):
            self.acc[:, mt, nt, e] += c

    def run_split(self, x, dy):
        """any_strides / cooperative_channels_last over the split's images x[n], dy[n] of one channel."""
        col_blocks = (self.OW + 15) >> 4
        for xn, dyn in zip(x, dy):
            for i in range(self.prologue_rows()):
                self.write_ring_row(self.prologue_slot(i), dyn[i] if i < self.PH and i < self.OH else np.zeros(self.OW))
            slot = self.PH % RING
            for r in range(self.H):
                self.stage_input_row(r & 1, xn[r])
                self.write_ring_row(slot, self.grad_output_row(dyn, r + self.PH))
                if self.early_writes and r + 1 < self.H:
                    self.stage_input_row((r + 1) & 1, xn[r + 1])
                    self.write_ring_row(slot + 1 if slot + 1 < RING else 0, self.grad_output_row(dyn, r + 1 + self.PH))
                self.mma_row((r & 1) * XBUF, slot, col_blocks)
                slot = slot + 1 if slot + 1 < RING else 0

    def store_partial(self):
        out = np.full((self.KH, self.KW), np.nan)
        for mt in range(self.MT):
            for nt in range(self.NT):
                for e in range(4):
                    kx, ky = 16 * mt + G + 8 * (e >> 1), 8 * nt + 2 * T + (e & 1)
                    keep = (ky < self.KH) & (kx < self.KW)
                    out[ky[keep], kx[keep]] = self.acc[keep, mt, nt, e]
        assert not np.isnan(out).any(), "a tap no lane stores"
        return out


def simulate(p: ConvProblem, kernel: str, x, dy, images_per_split: int):
    """dW of one channel (x [N, H, W], dy [N, OH, OW]) as the kernel's splits compute it, summed."""
    dw = np.zeros(p.filter_size)
    for n0 in range(0, p.batch, images_per_split):
        warp = Warp(p, kernel)
        warp.run_split(x[n0:n0 + images_per_split], dy[n0:n0 + images_per_split])
        dw += warp.store_partial()
    return dw


def direct_dw(p: ConvProblem, x, dy):
    """float64 dW[ky, kx] = sum Xpad[n, oh + DH ky, ow + DW kx] dY[n, oh, ow]."""
    (kh, kw), (oh, ow), (dh, dwid) = p.filter_size, p.output_size, p.dilation
    xpad = np.pad(x, ((0, 0), p.padding[0], p.padding[1]))
    out = np.zeros((kh, kw))
    for ky in range(kh):
        for kx in range(kw):
            window = xpad[:, dh * ky:dh * ky + oh, dwid * kx:dwid * kx + ow]
            out[ky, kx] = np.sum(window * dy)
    return out


@pytest.fixture
def bindings(monkeypatch):
    """cuda-bindings as if installed: the gate's shape reasons are what is checked."""
    monkeypatch.setattr(launcher, "_bindings", lambda: ((object(), object()), None))
    clear_plan_cache()
    yield
    monkeypatch.undo()
    clear_plan_cache()


SHAPES = {  # (input_size, filter_size, padding, dilation, batch); every one admitted by the gate
    "unirep-14-k7-d2": ((14, 14), 7, 6, 2, 3),
    "unirep-7-k3-d5": ((7, 7), 3, 5, 5, 3),
    "unirep-28-k3-d3": ((28, 28), 3, 3, 3, 2),
    "unirep-56-k3-d4": ((20, 56), 3, 4, 4, 2),
    "asym-top0-dh3-dw4": ((11, 19), (5, 3), ((0, 7), (5, 2)), (3, 4), 4),
    "top-pad-32-span-27": ((6, 9), (4, 5), ((32, 1), (4, 4)), (9, 2), 3),
    "one-pixel-d2": ((1, 1), 3, 2, 2, 3),
    "w64-dh2-dw3": ((9, 64), (3, 5), ((2, 2), (6, 6)), (2, 3), 2),
    "span-31-dh31": ((40, 13), (2, 3), ((31, 0), (1, 1)), (31, 1), 2),
    "k13-d2-span-24": ((30, 14), 13, 12, 2, 2),
    "k16-d2-span-30": ((33, 20), 16, ((15, 15), (2, 28)), 2, 2),
    "tile32-k9x17-d3x1": ((26, 40), (9, 17), ((12, 12), (8, 8)), (3, 1), 2),
    "tile32-k31-dw1-dh1": ((20, 23), (31, 29), ((15, 15), (14, 14)), 1, 2),
    "reach-160-dw8": ((5, 64), (3, 13), ((1, 1), (48, 48)), (1, 8), 2),
    "odd-dw-k15x3-d1x5": ((18, 30), (15, 3), ((7, 7), (3, 2)), (1, 5), 3),
}


def _problem(input_size, filter_size, padding, dilation, batch):
    return ConvProblem.build(batch=batch, groups=1, in_channels=1, input_size=input_size, filter_size=filter_size,
                             padding=padding, dilation=dilation, dtype="bf16")


def _operands(p, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((p.batch, *p.input_size)), rng.standard_normal((p.batch, *p.output_size))


@pytest.mark.parametrize("channels", [0, *launcher.COOPERATIVE_CHANNEL_COUNTS], ids=lambda c: f"cl{c}")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_simulated_kernel_equals_the_direct_sum(name, channels, bindings):
    p = _problem(*SHAPES[name])
    convwgrad.plan(p, "sm_90", family=FAMILY)   # admitted (NoCandidateError otherwise)
    kernel = launcher.stage1_kernel_name(p, channels)
    assert ("_dilated_cols" in kernel) == (p.dilation[1] > 1)
    x, dy = _operands(p, seed=len(name))
    want = direct_dw(p, x, dy)
    # two images a split (the ring and staged rows carried over from an image to the next), and one
    for per in (2, 1):
        got = simulate(p, kernel, x, dy, per)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("shape, reason, failure", [
    # 17 rows of dilation 2 span 32 rows: a cooperative warp's step r reads the ring slot that another
    # warp already refills with row r + 1 (the kernel for any strides would still be right)
    (((40, 20), 17, 16, 2, 2), "dilation=(2, 2), filter_size=(17, 17)", "Not equal"),
    # OW 64 + 7 x (15 - 1) = 162 > COPY_LEN: copy 0's reads pass into copy 1
    (((4, 64), (3, 15), ((1, 1), (49, 49)), (1, 7), 2), "output width 64", "outside its copy"),
])
def test_just_past_the_gate_the_simulation_fails(shape, reason, failure, bindings):
    """The gate's dilation bounds are the kernel's: a shape one past them is refused with the field
    named, and the simulated kernel on it breaks."""
    p = _problem(*shape)
    with pytest.raises(NoCandidateError, match=re.escape(reason)):
        convwgrad.plan(p, "sm_90", family=FAMILY)
    x, dy = _operands(p, seed=2)
    with pytest.raises(AssertionError, match=failure):
        got = simulate(p, launcher.stage1_kernel_name(p, 4), x, dy, 2)
        np.testing.assert_allclose(got, direct_dw(p, x, dy), rtol=1e-9, atol=1e-9)
