"""Sweep every admissible config of a problem, verify each against the reference, time the ones that pass."""

from __future__ import annotations

import statistics
import sys
import time

import attrs
import torch

from .provider.dispatch import dispatch_conv_grouped, record_launches
from .provider.layout import TORCH_DTYPES, to_layout
from .provider.plan import candidates, plan as make_plan, plan_spec
from .provider.problem import ConvProblem
from .provider.reference import TOLERANCE, TOLERANCE_TF32, reference_weight_grad, relative_error
from .provider.spec import KernelSpec
from .provider.target import current_target, launched

#: split_k degrees every sweep tries (the planned degree is added); inadmissible ones drop out.
SWEEP_SPLITS = (1, 2, 4, 8, 16, 32, 64)

#: Seconds a bench of one shape spends per multiply-add of it in Triton's interpreter (no GPU),
#: over all its configs (each verified, warmed up and timed three times): `convwgrad bench`'s CPU
#: demo, three shapes of 4.0e4 multiply-adds in all, took 39 s on a 2-core x86 machine. It grows
#: about linearly: one split-K run of N=8,C=64,28x28,k=3 (3.6e6 multiply-adds) alone took 116 s.
INTERPRETER_S_PER_MAC = 1e-3
#: The largest shape, in multiply-adds, the CLI benches in the interpreter unless told to
#: (--allow-slow): about 100 s at the rate above. A full-size layer is hours to days there (the
#: README's N=32,C=144,H=W=56,k=3 depthwise layer, 1.3e8 multiply-adds: about 36 hours).
INTERPRETER_MAX_MACS = 100_000


def multiply_adds(problem: ConvProblem) -> int:
    """The useful multiply-adds of ``problem``'s dW: what the interpreter's time grows with."""
    return problem.flops // 2



@attrs.frozen(kw_only=True)
class ConfigResult:
    spec: KernelSpec
    error: float
    passed: bool
    time_ms: float | None  # median; None when verification failed
    planned: bool
    note: str = ""

    def row(self) -> dict:
        tile = self.spec.tile
        return {
            "kernel_name": self.spec.kernel_name(),
            "family": self.spec.family,
            "gm": self.spec.group_merge,
            "spk": self.spec.split_k,
            "tile": tile.name if tile else "-",
            "error": self.error,
            "passed": self.passed,
            "time_ms": self.time_ms,
            "planned": self.planned,
            "note": self.note,
        }


@attrs.frozen(kw_only=True)
class ProblemResult:
    label: str
    problem: ConvProblem
    device: str
    timed_on_gpu: bool
    results: tuple[ConfigResult, ...]
    target: object = None  # the TargetInfo the configs were planned for

    def ranked(self) -> list[ConfigResult]:
        return sorted((r for r in self.results if r.passed), key=lambda r: r.time_ms)

    def failed(self) -> list[ConfigResult]:
        return [r for r in self.results if not r.passed]


def make_inputs(problem: ConvProblem, device, generator=None):
    """Fresh random input and grad_output in the problem's dtype and layout."""
    dtype = TORCH_DTYPES[problem.dtype]
    x = torch.randn(problem.input_shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    dy = torch.randn(problem.grad_output_shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    return to_layout(x, problem.layout), to_layout(dy, problem.layout)


def to_channels_last(t: torch.Tensor) -> torch.Tensor:
    return to_layout(t, "channels_last")


def sweep_specs(problem: ConvProblem, target, *, splits=SWEEP_SPLITS, first_tile_only: bool = False,
                family: str | None = None) -> list[KernelSpec]:
    """Every admissible spec: each family's candidates at each split_k degree, the planned one included.

    ``first_tile_only`` keeps each (family, group_merge)'s preferred tile, for quick sweeps;
    ``family`` keeps that family's candidates only (the planned spec still comes first).
    """
    pins = {"family": family} if family else {}
    chosen = make_plan(problem, target).spec
    specs = [chosen]
    first_tiles = {}
    for split in splits:
        for spec, verdict in candidates(problem, target, split_k=split, **pins):
            key = (spec.family, spec.group_merge)
            first_tiles.setdefault(key, spec.tile)
            if first_tile_only and spec.tile != first_tiles[key]:
                continue
            if verdict and spec not in specs:
                specs.append(spec)
    return specs


def tolerance(spec: KernelSpec) -> float:
    return TOLERANCE_TF32 if spec.allow_tf32 else TOLERANCE[spec.dtype]


def _time_ms(fn, *, on_gpu: bool, warmup_ms: float, rep_ms: float, graph: bool = True) -> float:
    """Median milliseconds of ``fn``. On a GPU, ``graph`` captures one call in a CUDA graph and
    times its replays, so the host-side dispatch (Python, pluggy, Triton's launcher: tens of
    microseconds) does not hide the kernels' own time on small layers."""
    if on_gpu:
        import triton.testing

        if graph:
            fn()  # compile and warm outside the capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                fn()
            fn = captured.replay
        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    fn()  # the interpreter: one warm run, three timed, wall clock
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench_problem(
    label: str,
    problem: ConvProblem,
    *,
    device=None,
    warmup_ms: float = 25,
    rep_ms: float = 100,
    progress=None,
    seed: int = 0,
    splits=SWEEP_SPLITS,
    first_tile_only: bool = False,
    graph: bool = True,
    reference_on_device: bool = False,
    timed: bool = True,
    specs=None,
    family: str | None = None,
    launch: str = "eager",
) -> ProblemResult:
    """Verify every admissible config of ``problem`` and time the ones that pass.

    ``launch`` names the plan marked as planned: the plan for eager calls, or for kernels launched
    from CUDA graphs (``"graph"``, where the router weighs kernel time only).

    ``specs`` replaces the sweep's configs (the planned one is always added); ``family`` keeps
    one family's configs (beside the planned one).
    ``timed=False`` verifies only (compiling every kernel on the way): several such
    processes can warm Triton's on-disk cache in parallel before one timed sweep.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    target = current_target(device)
    on_gpu = device.type == "cuda"
    generator = torch.Generator().manual_seed(seed)
    x, dy = make_inputs(problem, device, generator)
    reference = reference_weight_grad(problem, x, dy, device=device if reference_on_device else "cpu")
    planned = make_plan(problem, launched(target, launch))
    results = []
    if specs is None:
        specs = sweep_specs(problem, target, splits=splits, first_tile_only=first_tile_only, family=family)
    else:
        specs = [planned.spec, *(s for s in dict.fromkeys(specs) if s != planned.spec)]
    for index, spec in enumerate(specs):
        if progress:
            progress(index, len(specs), spec.kernel_name())
        config = plan_spec(problem, spec, target, "pinned by bench")
        out = torch.full(problem.weight_size, float("nan"), dtype=x.dtype, device=device)
        note = ""
        try:
            with record_launches() as log:
                dispatch_conv_grouped(problem, x, dy, plan=config, out=out)
            if log[-1].family != spec.family:
                note = f"ran {log[-1].family}, not {spec.family}"
            error = relative_error(out, reference)
        except Exception as exc:  # a config that crashes is a failure to report, not a reason to stop
            error, note = float("inf"), f"{type(exc).__name__}: {exc}"[:200]
        passed = error <= tolerance(spec) and not note
        time_ms = None
        if passed and timed:
            time_ms = _time_ms(
                lambda: dispatch_conv_grouped(problem, x, dy, plan=config, out=out),
                on_gpu=on_gpu, warmup_ms=warmup_ms, rep_ms=rep_ms, graph=graph,
            )
        results.append(ConfigResult(spec=spec, error=error, passed=passed, time_ms=time_ms,
                                    planned=spec == planned.spec, note=note))
    if progress:
        progress(len(specs), len(specs), "")
    return ProblemResult(label=label, problem=problem, device=str(device), timed_on_gpu=on_gpu,
                         results=tuple(results), target=target)


def format_table(result: ProblemResult) -> str:
    p = result.problem
    ranked = result.ranked()
    lines = [f"== {result.label}: {p.describe()}"]
    floor_note = ""
    if ranked and result.timed_on_gpu:
        best = ranked[0].time_ms
        floor_note = f"  (min bytes {p.min_bytes / 1e6:.1f} MB; best {p.min_bytes / best / 1e6:.0f} GB/s)"
    lines.append(f"   {len(ranked)} passed, {len(result.failed())} failed verification{floor_note}")
    # time_ms, the unit of --json, the results CSV and ConfigResult; four decimals keep the 0.1 us
    lines.append(f"   {'rank':>4} {'time_ms':>10} {'x best':>7} {'family':<13} {'gm':>3} {'spk':>4} {'tile':<16} {'rel_err':>9}  kernel")
    for rank, r in enumerate(ranked, start=1):
        mark = "  <- plan" if r.planned else ""
        tile = r.spec.tile.name if r.spec.tile else "-"
        lines.append(
            f"   {rank:>4} {r.time_ms:>10.4f} {r.time_ms / ranked[0].time_ms:>7.2f} {r.spec.family:<13} "
            f"{r.spec.group_merge:>3} {r.spec.split_k:>4} {tile:<16} {r.error:>9.2e}  {r.spec.kernel_name()}{mark}"
        )
    for r in result.failed():
        lines.append(f"   FAILED {r.spec.kernel_name()}: rel_err {r.error:.2e} > {tolerance(r.spec):.0e} {r.note}")
    if not result.timed_on_gpu:
        lines.append("   (no GPU: kernels ran in the Triton interpreter; these timings mean nothing)")
    return "\n".join(lines)


class ProgressBar:
    """Progress on stderr: on a terminal, a bar redrawn in place; elsewhere (a log, a pipe, a job's
    output) one line per config, so a slow run shows it is moving. ``enabled=False`` draws nothing."""

    def __init__(self, label: str, enabled: bool | None = None):
        self.label = label
        self.enabled = True if enabled is None else enabled

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        stream = sys.stderr  # looked up per call: a test's capture replaces it
        if not stream.isatty():
            if done < total:
                stream.write(f"{self.label}: config {done + 1}/{total} {what}\n")
                stream.flush()
            return
        width = 30
        filled = width * done // max(total, 1)
        stream.write(f"\r{self.label[:30]:<30} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what[:50]:<50}")
        if done == total:
            stream.write("\n")
        stream.flush()
