"""The shifted-MMA family's 1-D (sequence) kernels, simulated on the CPU with NumPy exactly as kernels.cu
does them (their GPU run is tests/plugins/wgrad_shifted_mma/test_shifted_mma_gpu.py): the schedule of units
and splits (launcher.sequence_schedule), each unit's prologue, the circular input copies and the swizzled
grad_output buffer (seq_slot), the A pairs and the ldmatrix.x2 rows of a step, the m16n8k16 fragments and the
folded taps k = kx + 16 ky. Every buffer slot carries the sequence position written there, and every read
that reaches a kept dW entry is checked to find the position it means (none stale, none overwritten by the
next step's writes, which are simulated before this step's reads); the simulated dW is checked against a
direct float64 sum. The bank maps of the A loads and of the swizzle are checked too (the sm_90 build: test_shifted_mma_gate.py)."""

import math
import re

import numpy as np
import pytest

import convwgrad
from convwgrad.plugins.wgrad_shifted_mma import launcher
from convwgrad.provider import ConvProblem
from convwgrad.provider.plan import NoCandidateError, clear_plan_cache
from mma_fragments import LANE, G, T, mma16816

FAMILY = "wgrad_shifted_mma"
# the source's constant (kernels.cu); a kernel's buffers hold 4 STEP positions
SEQ_BACK = 128


def seq_slot(pos, buf):
    i = np.asarray(pos) & (buf - 1)
    return i ^ (((i >> 6) & 1) << 3)


class SequenceWarp:
    """One warp's buffers (zero at the kernel's start) with the position each slot holds, and its
    accumulator fragment acc[lane, e], over one split's units."""

    def __init__(self, p: ConvProblem, step: int, buf_steps: int = 4):
        self.STEP, self.BUF = step, buf_steps * step
        self.COPY1 = self.BUF + 32   # kernels.cu's SEQ_COPY1
        SEQ_BUF = self.BUF
        (self.K,), (self.L,), (self.LO,) = p.filter_size, p.input_size, p.output_size
        self.P = p.padding[0][0]
        self.tap_rows = math.ceil(self.K / 16)
        self.xs, self.x_tag = np.zeros(self.COPY1 + SEQ_BUF), np.full(self.COPY1 + SEQ_BUF, -10**9)
        self.ds, self.d_tag = np.zeros(SEQ_BUF), np.full(SEQ_BUF, -10**9)
        self.acc = np.zeros((32, 4))

    # --- values as the kernel's loads give them (zero outside the sequence)
    def x_at(self, xn, m):
        i = m - self.P
        return xn[i] if 0 <= i < self.L else 0.0

    def dy_at(self, dyn, o):
        return dyn[o] if 0 <= o < self.LO else 0.0

    # --- writes: seq_put_x, and the grad_output buffer at seq_slot
    def put_x(self, m, v):
        SEQ_BUF = self.BUF
        for index in (m & (SEQ_BUF - 1), self.COPY1 + ((m - 1) & (SEQ_BUF - 1))):   # copy 1: one slot back
            self.xs[index], self.x_tag[index] = v, m

    def put_dy(self, o, v):
        slot = int(seq_slot(o, self.BUF))
        self.ds[slot], self.d_tag[slot] = v, o

    def write_step(self, xn, dyn, j0):
        for lane in range(32):
            for i in range(self.STEP // 32):
                m, o = j0 + 16 + lane + 32 * i, j0 + lane + 32 * i
                self.put_x(m, self.x_at(xn, m))
                self.put_dy(o, self.dy_at(dyn, o))

    # --- reads
    def a_pair(self, q, odd):
        """lds32 of the pair Xpad[q], Xpad[q + 1] (q per lane) from copy ``odd`` (q's parity)."""
        SEQ_BUF = self.BUF
        assert np.all(q % 2 == odd)
        within = (q - odd) & (SEQ_BUF - 1)
        index = odd * self.COPY1 + within
        assert np.all(index % 2 == 0), "unaligned 32-bit A load"
        assert np.all(within + 1 < SEQ_BUF), "an A pair wraps its copy"
        tags = self.x_tag[index], self.x_tag[index + 1]
        assert np.all(tags[0] == q) and np.all(tags[1] == q + 1), ("stale or overwritten input", q)
        return self.xs[index], self.xs[index + 1]

    def ldmatrix_x2(self, positions):
        """ldmatrix.x2 at seq_slot(positions[lane]) for lanes 0-15 (matrix lane // 8, row lane % 8): thread
        T gets row T // 4, columns 2 (T % 4) and + 1 of each matrix."""
        addr = seq_slot(positions, self.BUF)
        assert np.all(addr % 8 == 0) and np.all(addr + 8 <= self.BUF), "unaligned or out-of-buffer ldmatrix row"
        regs = []
        for i in range(2):
            row = 8 * i + LANE // 4          # the lane that gave the row
            slot = addr[row] + 2 * T
            ky = row & 7
            kept = ky < self.tap_rows        # columns ky >= tap_rows feed dropped dW entries only
            want = positions[row] + 2 * T
            assert np.all(self.d_tag[slot][kept] == want[kept]), ("stale grad_output", want[kept])
            assert np.all(self.d_tag[slot + 1][kept] == want[kept] + 1)
            regs.append((self.ds[slot], self.ds[slot + 1]))
        return regs

    def mma_step(self, j0):
        odd = G & 1
        a_pos = 2 * T + G - odd
        lm_pos = ((LANE >> 3) & 1) * 8 - 16 * (LANE & 7)
        for cb in range(self.STEP // 16):
            jb = j0 + 16 * cb
            # Xpad positions of a0..a3: kx = g (+ 8), j = 2t (+ 8); a1 and a2 are one position
            a = [self.a_pair(jb + a_pos + odd + shift, odd) for shift in (0, 8, 8, 16)]
            b = self.ldmatrix_x2(jb + lm_pos)
            for e, c in enumerate(mma16816(a, b)):
                self.acc[:, e] += c

    def run_split(self, x, dy, schedule, split):
        """seq_any_strides / seq_cooperative_channels_last over split ``split``'s units of one channel."""
        steps, per_unit, per_split = schedule
        units_per_image = math.ceil(steps / per_unit)
        u_begin = split * per_split
        u_end = min(len(x) * units_per_image, u_begin + per_split)
        for u in range(u_begin, u_end):
            n, s_begin = u // units_per_image, (u % units_per_image) * per_unit
            s_end = min(steps, s_begin + per_unit)
            xn, dyn = x[n], dy[n]
            j0 = s_begin * self.STEP
            for i in range(SEQ_BACK):
                self.put_dy(j0 - SEQ_BACK + i, self.dy_at(dyn, j0 - SEQ_BACK + i))
            for lane in range(16):
                self.put_x(j0 + lane, self.x_at(xn, j0 + lane))
            for s in range(s_begin, s_end):
                self.write_step(xn, dyn, j0)
                if s + 1 < s_end:   # another lane or warp may write the next step's positions first
                    self.write_step(xn, dyn, j0 + self.STEP)
                self.mma_step(j0)
                j0 += self.STEP

    def store_partial(self):
        out = np.full(self.K, np.nan)
        for e in range(4):
            k = G + 8 * (e >> 1) + 16 * (2 * T + (e & 1))
            keep = k < self.K
            assert np.all(np.isnan(out[k[keep]])), "a tap stored twice"
            out[k[keep]] = self.acc[keep, e]
        assert not np.isnan(out).any(), "a tap no lane stores"
        return out


def simulate(p: ConvProblem, x, dy, split_k: int, step: int = launcher.SEQUENCE_STEP, buf_steps: int = 4):
    """dW of one channel (x [N, L], dy [N, LO]) as the kernel's splits compute it, summed."""
    schedule = launcher.sequence_schedule(p, split_k, step)
    units = p.batch * math.ceil(schedule.steps_per_image / schedule.steps_per_unit)
    assert schedule.units_per_split * split_k >= units, "a unit no split runs"
    dw = np.zeros(p.filter_size)
    for split in range(split_k):
        warp = SequenceWarp(p, step, buf_steps)
        warp.run_split(x, dy, schedule, split)
        dw += warp.store_partial()
    return dw


def direct_dw(p: ConvProblem, x, dy):
    """float64 dW[k] = sum Xpad[n, o + k] dY[n, o]."""
    (k,), (lo,) = p.filter_size, p.output_size
    xpad = np.pad(x, ((0, 0), p.padding[0]))
    return np.array([np.sum(xpad[:, tap:tap + lo] * dy) for tap in range(k)])


@pytest.fixture
def bindings(monkeypatch):
    """cuda-bindings as if installed: the gate's shape reasons are what is checked."""
    monkeypatch.setattr(launcher, "_bindings", lambda: ((object(), object()), None))
    clear_plan_cache()
    yield
    monkeypatch.undo()
    clear_plan_cache()


SHAPES = {  # (length, filter, padding, batch); every one admitted by the gate
    "conformer-k31": (512, 31, 15, 3),
    "mamba-causal-k4": (300, 4, ((3, 0),), 2),
    "k1": (70, 1, 0, 2),
    "k16-one-tap-row": (129, 16, ((15, 0),), 2),
    "k17-two-tap-rows": (100, 17, 8, 3),
    "k128-eight-tap-rows": (200, 128, ((64, 63),), 2),
    "short-5-k31-all-padding": (5, 31, 15, 4),
    "one-position": (1, 3, 1, 3),
    "valid-k64": (64, 64, 0, 2),
    "odd-right-heavy": (333, 45, ((2, 40),), 2),
}


def _problem(length, k, padding, batch, channels=4096):
    """One channel is simulated; the channel count sets the schedule: 4096 channels (1024 CTAs a split) make
    one split per image, so units are whole images of many steps (a step's writes land beside the previous
    step's reads), 1 channel cuts every image into one-step units (each re-staged by a prologue)."""
    return ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(length,),
                             filter_size=k, padding=padding, dtype="bf16")


@pytest.mark.parametrize("channels", [4096, 1], ids=["whole-images", "one-step-units"])
@pytest.mark.parametrize("step", launcher.SEQUENCE_STEPS)
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_simulated_sequence_kernel_equals_the_direct_sum(name, step, channels, bindings):
    p = _problem(*SHAPES[name], channels=channels)
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)   # admitted (NoCandidateError otherwise)
    assert launcher.stage1_kernel_name(p) == "wgrad_shifted_mma_seq_kernel"
    rng = np.random.default_rng(len(name))
    x, dy = rng.standard_normal((p.batch, *p.input_size)), rng.standard_normal((p.batch, *p.output_size))
    want = direct_dw(p, x, dy)
    # the planned splits, fewer splits than images, and more (an image cut into units), past every step
    steps = p.batch * launcher.sequence_steps(p, step)
    for split_k in sorted({chosen.spec.split_k, 2, p.batch + 1, 2 * p.batch + 1, steps, steps + 3}):
        got = simulate(p, x, dy, split_k, step)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(), err_msg=f"{split_k=}")


def test_a_buffer_one_step_short_breaks_the_simulation(bindings, monkeypatch):
    """The simulation can fail: with grad_output staged 64 positions less far back (SEQ_BACK 64), the
    8-tap-row filter's reads of the prologue find positions no one wrote."""
    p = _problem(*SHAPES["k128-eight-tap-rows"])
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((p.batch, *p.input_size)), rng.standard_normal((p.batch, *p.output_size))
    monkeypatch.setitem(globals(), "SEQ_BACK", 64)
    with pytest.raises(AssertionError, match="stale grad_output"):
        simulate(p, x, dy, 2)


@pytest.mark.parametrize("step", launcher.SEQUENCE_STEPS)
def test_buffers_of_two_steps_break_the_simulation(step, bindings):
    """Buffers of 2 STEP positions instead of 4: a step's writes overwrite what the previous step still reads
    (units of many steps), and the position tags catch it."""
    p = _problem(2000, 31, 15, 2)
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((p.batch, *p.input_size)), rng.standard_normal((p.batch, *p.output_size))
    assert launcher.sequence_schedule(p, 2, step).steps_per_unit > 2
    simulate(p, x, dy, 2, step)   # the kernel's buffers: right
    with pytest.raises(AssertionError, match="stale or overwritten"):
        simulate(p, x, dy, 2, step, buf_steps=2)


def test_copy_one_keeps_a_loads_off_copy_zeros_banks():
    """The odd-g lanes read copy 1, the even-g ones copy 0, in one A load: with copy 1 at SEQ_COPY1 = BUF + 32
    elements the 32 lanes' words fall in distinct banks or share a word (a broadcast); at BUF they conflict."""
    for copy1, conflict_free in ((256 + 32, True), (256, False)):
        worst = 1
        for jb in range(0, 256, 16):
            for shift in (0, 8, 16):
                odd = G & 1
                element = odd * copy1 + ((jb + 2 * T + G - odd + shift) & 255)
                words = element // 2
                for bank in range(32):
                    distinct = set(words[words % 32 == bank].tolist())
                    worst = max(worst, len(distinct))
        assert (worst == 1) == conflict_free


def test_the_swizzle_puts_a_b_fragments_rows_in_eight_bank_groups():
    """seq_slot: the eight rows of an ldmatrix matrix (16 positions apart, 16 bytes each) land in eight
    different 16-byte bank groups from every 8-aligned start, so ldmatrix.x2 runs conflict-free; the plain
    circular index would put rows ky and ky + 4 in one group."""
    for swizzled, buf in ((True, 256), (True, 512), (False, 256)):
        worst = 0
        for start in range(0, buf, 8):
            positions = start - 16 * np.arange(8)
            slots = seq_slot(positions, buf) if swizzled else positions & (buf - 1)
            groups = np.bincount((slots // 8) % 8, minlength=8)
            worst = max(worst, groups.max())
        assert worst == (1 if swizzled else 2)


@pytest.mark.parametrize("overrides, reason", [
    (dict(stride=2), "stride=(2,): stride 1 only"),
    (dict(dilation=2, padding=30), "dilation=(2,): the sequence kernels are undilated"),
    (dict(filter_size=129, padding=64), "filter_size=(129,): at most 128 taps"),
    (dict(dtype="fp32"), "dtype=fp32"),
    (dict(groups=64, in_channels=128), "cpg=2"),
])
def test_1d_refused_with_the_field_and_value(overrides, reason, bindings):
    kwargs = dict(batch=4, groups=128, in_channels=128, input_size=(512,), filter_size=31, padding=15, dtype="bf16")
    kwargs.update(overrides)
    p = ConvProblem.build(**kwargs)
    with pytest.raises(NoCandidateError, match=re.escape(reason)):
        convwgrad.plan(p, "sm_90", family=FAMILY)


@pytest.mark.parametrize("batch, length, channels, k", [
    (32, 512, 256, 31),     # Conformer: many images, whole images a unit
    (1, 16384, 512, 31),    # one long image: cut into units
    (2, 64, 8, 4),          # fewer steps than the CTAs asked for
    (16, 2048, 1024, 4),    # Mamba
])
def test_sequence_splits_cover_the_batch_with_whole_or_cut_images(batch, length, channels, k, bindings):
    p = ConvProblem.build(batch=batch, groups=channels, in_channels=channels, input_size=(length,), filter_size=k,
                          padding=k // 2, dtype="bf16")
    chosen = convwgrad.plan(p, "sm_90", family=FAMILY)
    split_k = chosen.spec.split_k
    assert 2 <= split_k <= max(2, batch * launcher.sequence_steps(p))
    steps, per_unit, per_split = launcher.sequence_schedule(p, split_k)
    units = batch * math.ceil(steps / per_unit)
    assert per_split * split_k >= units and per_split * (split_k - 1) < max(units, 2)
    if batch >= split_k:
        assert per_unit == steps   # whole images: no unit pays a prologue inside an image
    assert chosen.grid[0] == (math.ceil(channels / launcher.WARPS), split_k, 1)
    assert chosen.workspace_nbytes == split_k * math.prod(p.weight_size) * 4


def test_1d_cooperative_layout_is_channels_last_vectors(bindings):
    import torch

    p = ConvProblem.build(batch=4, groups=64, in_channels=64, input_size=(100,), filter_size=31, padding=15,
                          dtype="bf16", layout="channels_last")
    cl = torch.empty(4, 100, 64, device="meta").transpose(1, 2)   # (N, C, L) with channel stride 1
    nchw = torch.empty(4, 64, 100, device="meta")
    assert launcher.cooperative_layout(p, (*cl.stride(), *cl.stride()), 4)
    assert not launcher.cooperative_layout(p, (*nchw.stride(), *nchw.stride()), 4)
    assert launcher.stage1_kernel_name(p, 4) == "wgrad_shifted_mma_seq_cl4_kernel"
    assert launcher.stage1_kernel_name(p, 4, 128) == "wgrad_shifted_mma_seq_cl4_s128_kernel"
    for step in launcher.SEQUENCE_STEPS:
        for channels in (0, 4):
            assert launcher.stage1_kernel_name(p, channels, step) in launcher.KERNEL_NAMES


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("overrides, routed", [
    (dict(filter_size=31, padding=15), True),      # Conformer: 25.5 / 23.8 us against merged's 79.7 / 56.6 (H100)
    (dict(filter_size=15, padding=7), True),       # the smallest filter measured faster
    (dict(filter_size=128, padding=64), True),
    (dict(filter_size=4, padding=3), False),       # Mamba: merged measured faster (133 / 77 against 157 / 150)
    (dict(filter_size=13, padding=6), False),      # below the taps measured
    (dict(filter_size=31, padding=15, dtype="fp16"), False),   # same kernels, not timed
    (dict(filter_size=31, padding=15, stride=2), False),
])
def test_1d_routed_only_on_its_measured_class(overrides, routed, layout, bindings):
    from convwgrad.selectors import routing

    kwargs = dict(batch=32, groups=256, in_channels=256, input_size=(512,), dtype="bf16", layout=layout)
    kwargs.update(overrides)
    chosen = convwgrad.plan(ConvProblem.build(**kwargs), "sm_90")
    assert (chosen.family == FAMILY) == routed, (chosen.family, chosen.rule)
    if routed:
        assert "1-D depthwise" in chosen.rule and "H100" in chosen.rule
    assert (routing._shifted_mma_measured_faster(ConvProblem.build(**kwargs)) is not None) == routed
