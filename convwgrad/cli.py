"""The ``convwgrad`` command: bench, sweep, score, explain, compile.

A user's mistake exits with status 2. One that argparse can see in the command line alone
(a malformed option value) is argparse's message under the usage; one found once the command
runs (a file that cannot be read, a shape, a target, options that need each other) is one
``convwgrad: error: ...`` line naming the value.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

PROG = "convwgrad"


class _UsageError(Exception):
    """A mistake in what the user asked for: one ``convwgrad: error:`` line, exit status 2."""


# ------------------------------------------------------------- argument types
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _positive_ints(text: str) -> tuple[int, ...]:
    return tuple(_positive_int(item) for item in text.split(","))


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    try:
        index, count = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N (e.g. 1/4: every 4th shape from the second)") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"{text}: I must be 0 to N-1 (N={count} shards, numbered from 0)")
    return index, count


# ---------------------------------------------------------------- file checks
def _check_readable(path: str, option: str) -> None:
    """Refuse a file that cannot be read before any work starts (a sweep may run for hours)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise _UsageError(f"{option} {path}: {exc.strerror or exc}") from None


def _check_writable(path: str, option: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise _UsageError(f"{option} {path}: is a directory")
    if not os.path.isdir(folder):
        raise _UsageError(f"{option} {path}: directory {folder} does not exist")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise _UsageError(f"{option} {path}: permission denied")


# ------------------------------------------------------------------- problems
def _problems(args) -> list:
    from .shapes import CPU_DEMO, GPU_DEMO, parse_shape, read_csv

    defaults = {"dtype": args.dtype, "layout": args.layout}
    for path in args.csv or ():
        _check_readable(path, "--csv")
    problems = [parse_shape(s, **defaults) for s in args.shape or ()]
    for path in args.csv or ():
        rows = read_csv(path, **defaults)
        if not rows:
            raise _UsageError(f"--csv {path}: no shapes in it (a header of shape keys, then one shape per row)")
        problems += rows
    if not problems and getattr(args, "demo_ok", False):
        import torch

        demo = GPU_DEMO if torch.cuda.is_available() else CPU_DEMO
        problems = [parse_shape(s, **defaults) for s in demo]
    if not problems:
        raise _UsageError("no shape given: give --shape KEY=VALUE,... or --csv FILE")
    return problems


def _check_interpreter_sizes(problems, *, allow_slow: bool) -> None:
    """Without a GPU, refuse (or, told to, announce) the shapes the interpreter takes long over."""
    import torch

    from .bench import INTERPRETER_MAX_MACS, INTERPRETER_S_PER_MAC, multiply_adds

    if torch.cuda.is_available():
        return
    large = [(label, multiply_adds(p)) for label, p in problems if multiply_adds(p) > INTERPRETER_MAX_MACS]
    if not large:
        return
    label, macs = max(large, key=lambda item: item[1])
    if not allow_slow:
        others = f" ({len(large)} shapes are over the limit; this is the largest)" if len(large) > 1 else ""
        raise _UsageError(
            f"shape {label} has {macs:.2g} multiply-adds{others}: without a GPU the kernels run in the Triton "
            f"interpreter, about {_duration(macs * INTERPRETER_S_PER_MAC)} for this shape (the limit is "
            f"{INTERPRETER_MAX_MACS:,}, about {_duration(INTERPRETER_MAX_MACS * INTERPRETER_S_PER_MAC)}). "
            f"Run it on a GPU, shrink it (N, C, H, W), or pass --allow-slow"
        )
    total = sum(macs for _, macs in large) * INTERPRETER_S_PER_MAC
    print(f"{len(large)} shape(s) over {INTERPRETER_MAX_MACS:,} multiply-adds in the Triton interpreter: "
          f"about {_duration(total)} (--allow-slow)", file=sys.stderr)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds / 86400:.0f} days"


def _add_problem_args(parser, *, demo: bool):
    from .shapes import KEYS

    keys = "; ".join(f"{key}: {meaning}" for key, meaning in KEYS.items())
    parser.add_argument("--shape", action="append", metavar="SPEC",
                        help=f"e.g. N=32,C=144,H=56,W=56,k=3,s=1,g=144 (repeatable). Keys: {keys}")
    parser.add_argument("--csv", action="append", metavar="FILE",
                        help="a CSV file with one shape per row, its header the --shape keys (repeatable)")
    parser.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp32"))
    parser.add_argument("--layout", default="channels_last", choices=("contiguous", "channels_last"))
    parser.set_defaults(demo_ok=demo)


def _add_pin_args(parser):
    parser.add_argument("--family", default=None, help="pin the kernel family (wgrad_merged, wgrad_splitk, aten, ...)")
    parser.add_argument("--split-k", type=_positive_int, default=None, help="pin the split-K degree")
    parser.add_argument("--group-merge", type=_positive_int, default=None,
                        help="pin the merge degree Gm (groups per program, wgrad_merged)")


def _pins(args) -> dict:
    """plan()'s pins from the options given."""
    given = {"family": args.family, "split_k": args.split_k, "group_merge": args.group_merge}
    return {name: value for name, value in given.items() if value is not None}


# ------------------------------------------------------------------- commands
def cmd_bench(args) -> int:
    import torch

    from .bench import ProgressBar, bench_problem, format_table

    problems = _problems(args)
    _check_interpreter_sizes(problems, allow_slow=args.allow_slow)
    if not torch.cuda.is_available():
        print("no GPU found: running the kernels through the Triton interpreter on the CPU; "
              "timings there mean nothing", file=sys.stderr)
    results = []
    for label, problem in problems:
        progress = ProgressBar(label, enabled=args.progress)
        result = bench_problem(label, problem, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=progress,
                               splits=args.splits, first_tile_only=args.first_tile_only, graph=args.graph,
                               family=args.family)
        results.append(result)
        if not args.json:
            print(format_table(result), flush=True)
    if args.json:
        json.dump(
            [
                {"label": r.label, "problem": r.problem.describe(), "device": r.device,
                 "timed_on_gpu": r.timed_on_gpu, "configs": [c.row() for c in r.results]}
                for r in results
            ],
            sys.stdout,
            indent=1,
        )
        print()
    failed = sum(len(r.failed()) for r in results)
    return 1 if failed else 0


def cmd_sweep(args) -> int:
    import torch

    from .bench import ProgressBar, bench_problem
    from .scoring import measured_shapes, write_results
    from .shapes import read_csv

    if args.changed_only and not args.confirm_from:
        raise _UsageError("--changed-only needs --confirm-from RESULTS (the plans it compares against)")
    _check_readable(args.shapes, "shapes file")
    for path in args.confirm_from or ():
        _check_readable(path, "--confirm-from")
    _check_writable(args.output, "--output")
    problems = read_csv(args.shapes, dtype=args.dtype, layout=args.layout)
    if not problems:
        raise _UsageError(f"shapes file {args.shapes}: no shapes in it "
                          "(a header of shape keys, then one shape per row)")
    ranks = _torchrun_ranks()
    output = args.output
    order = [label for label, _ in problems]  # a single run's row order, which a merge keeps
    if ranks is not None:
        if args.shard != (0, 1):
            raise _UsageError(f"--shard {args.shard[0]}/{args.shard[1]} under torchrun: torchrun's ranks already "
                              "split the shapes; give one or the other")
        rank, world, local_rank = ranks
        args.shard = (rank, world)
        output = _rank_part(args.output, rank, world)
        if not args.resume and os.path.exists(output):
            os.remove(output)  # an interrupted run's part: merged, it would bring back shapes not asked for
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
    index, count = args.shard
    problems = problems[index::count]
    if args.resume:
        done = measured_shapes(args.output) | (measured_shapes(output) if output != args.output else set())
        problems = [(label, p) for label, p in problems if label not in done]
        print(f"resuming: {len(done)} shapes already in {args.output}"
              f"{f' and {output}' if output != args.output else ''}, {len(problems)} to go", file=sys.stderr)
    confirm = None
    if args.confirm_from:
        problems, confirm = _confirm_selection(args, problems)
    _check_interpreter_sizes(problems, allow_slow=args.allow_slow)
    if not torch.cuda.is_available():
        print("no GPU found: the sweep runs through the Triton interpreter; its timings mean nothing", file=sys.stderr)
    results = []
    for label, problem in problems:
        progress = ProgressBar(label, enabled=args.progress)
        result = bench_problem(label, problem, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=progress,
                               splits=args.splits, first_tile_only=args.first_tile_only, graph=args.graph,
                               reference_on_device=args.reference_on_device, timed=not args.verify_only,
                               specs=confirm[label] if confirm else None, launch=args.launch)
        # one shape at a time, appended, so a sweep cut off by a time limit keeps what it measured
        write_results([result], output, append=args.resume or bool(results))
        results.append(result)
    failed = sum(len(r.failed()) for r in results)
    print(f"{len(problems)} shapes, {sum(len(r.results) for r in results)} configs, {failed} failed verification "
          f"-> {output}")
    if ranks is not None:  # every rank returns the whole run's verdict, after rank 0 has merged
        failed = _merge_rank_parts(args.output, ranks, order, failed, resumed=args.resume)
    return 1 if failed else 0


def _torchrun_ranks():
    """(rank, world size, local rank) when torchrun started this process as one of several ranks
    (its TORCHELASTIC_RUN_ID, RANK, WORLD_SIZE and LOCAL_RANK variables), else None. RANK and
    WORLD_SIZE alone, inherited from a distributed job that runs the command, do not count."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ or "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    return int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0"))


def _rank_part(output: str, rank: int, world: int) -> str:
    """The file one torchrun rank writes its shapes to; rank 0 merges them into ``output``."""
    return f"{output}.rank{rank}-of-{world}"


#: How long a rank waits at the merge for the slowest one: a shard may run for hours, and the
#: wait starts once this rank's own shapes are done. A rank that crashes ends the others sooner:
#: torchrun's agent stops them.
MERGE_TIMEOUT_S = 24 * 3600


def _merge_rank_parts(output: str, ranks, order: list[str], failed: int, *, resumed: bool) -> int:
    """Wait for every rank (gloo, over torchrun's rendezvous variables); rank 0 then writes
    ``output``: the rows it already held when resuming, then every rank's rows shape by shape in
    the shapes file's order, as one process would have written them, through a temporary file
    renamed over ``output`` (an interrupted merge leaves the old file and the parts); the parts
    are removed once merged. Every rank waits for the merge and returns the failures of all."""
    import csv
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from .scoring import COLUMNS

    rank, world, _ = ranks
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=MERGE_TIMEOUT_S))
    try:
        total = torch.tensor([failed])
        dist.all_reduce(total)  # also the barrier: every rank has written its part
        if rank == 0:
            kept = []
            if resumed and os.path.exists(output):
                with open(output, newline="") as f:
                    kept = list(csv.DictReader(f))
            by_shape: dict[str, list[dict]] = {}
            parts = [_rank_part(output, r, world) for r in range(world)]
            for part in parts:
                if os.path.exists(part):
                    with open(part, newline="") as f:
                        for row in csv.DictReader(f):
                            by_shape.setdefault(row["shape"], []).append(row)
            rows = kept + [row for label in order for row in by_shape.pop(label, [])]
            rows += [row for left in by_shape.values() for row in left]  # shapes the file no longer lists
            merging = f"{output}.merging"
            with open(merging, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
            os.replace(merging, output)
            for part in parts:
                if os.path.exists(part):
                    os.remove(part)
            print(f"merged {world} ranks: {len({r['shape'] for r in rows})} shapes, {len(rows)} rows, "
                  f"{int(total.item())} failed verification -> {output}")
        dist.barrier()  # no rank exits (and has torchrun stop the others) before the merge is written
        return int(total.item())
    finally:
        dist.destroy_process_group()


def _confirm_selection(args, problems):
    """The shapes ``--confirm-from`` re-times (all of that file's, or those whose plan changed
    with ``--changed-only``) and, per shape, the reference configs to time beside the plan."""
    import torch

    from .provider.plan import plan as make_plan
    from .provider.spec import spec_from_dict
    from .provider.target import current_target, launched
    from .scoring import planned_specs, reference_specs

    references = reference_specs(*args.confirm_from)
    confirm = {shape: [spec_from_dict(d) for d in dicts] for shape, dicts in references.items()}
    problems = [(label, p) for label, p in problems if label in confirm]
    if args.changed_only:
        before = planned_specs(*args.confirm_from)
        target = launched(current_target("cuda" if torch.cuda.is_available() else "cpu"), args.launch)
        problems = [(label, p) for label, p in problems
                    if label not in before or make_plan(p, target).spec != spec_from_dict(before[label])]
        print(f"{len(problems)} shapes whose plan changed since {' + '.join(args.confirm_from)}", file=sys.stderr)
    return problems, confirm


def cmd_score(args) -> int:
    import json as json_module

    from .scoring import format_score, plot, read_results, replan, score

    if args.launch != "eager" and not args.replan:
        raise _UsageError(f"--launch {args.launch} replans the policy: it needs --replan")
    for path in args.results:
        _check_readable(path, "results file")
    for path, option in ((args.plot, "--plot"), (args.tuning_cache, "--tuning-cache")):
        if path:
            _check_writable(path, option)
    if args.replan:
        scores, unmeasured = replan(*args.results, launch=args.launch)
        confirm_from = " ".join(f"--confirm-from {path}" for path in args.results)
        print(f"the current code's plan, looked up among the sweep's measured configs: {len(scores)} shapes; "
              f"{len(unmeasured)} planned a config the sweep did not time (re-time them with "
              f"`sweep {confirm_from} --changed-only`){': ' if unmeasured else ''}"
              f"{', '.join(unmeasured[:10])}{' ...' if len(unmeasured) > 10 else ''}", file=sys.stderr)
    else:
        scores = read_results(*args.results)
    summary = score(scores)
    print(json_module.dumps(summary, indent=1) if args.json else format_score(summary))
    if args.plot:
        print(plot(scores, args.plot), file=sys.stderr)
    if args.tuning_cache:
        from .selectors.tuning import cache_from_results

        count = cache_from_results(args.results[0], args.tuning_cache)
        print(f"{count} tuned entries -> {args.tuning_cache} (use with CONVWGRAD_TUNING_CACHE)", file=sys.stderr)
    return 0


def cmd_explain(args) -> int:
    from .provider.plan import explain
    from .provider.target import launched, resolve_target

    problems = _problems(args)
    target = launched(resolve_target(args.target), args.launch)  # before any output: a bad target is the whole error
    for label, problem in problems:
        explanation = explain(problem, target, **_pins(args))  # a refused pin is an error, not a header
        print(f"== {label}")
        print(explanation)
    return 0


def cmd_compile(args) -> int:
    from .provider.aot import compile as aot_compile
    from .provider.manager import families
    from .provider.plan import plan as make_plan
    from .provider.target import resolve_target

    problems = _problems(args)
    target = resolve_target(args.target)
    pins = _pins(args)
    for label, problem in problems:
        # compiled before the header: a target that compiles nothing is an error, not a header
        kernels = aot_compile(problem, target, **pins)
        print(f"== {label}: {problem.describe()} -> {target.name}")
        if not kernels:
            chosen = make_plan(problem, target, **pins)  # cached: the plan compile() just made
            others = " or ".join(f"--family {name}" for name in families().names() if name != chosen.family)
            print(f"   nothing to compile: the plan chose family {chosen.family}, which has no Triton kernel"
                  f"{'; pin another with ' + others if others else ''}\n   rule: {chosen.rule}")
        for kernel in kernels:
            print(f"   {kernel.name}\n      {kernel.isa()}")
    return 0


def _add_timing_args(parser):
    from .bench import INTERPRETER_MAX_MACS, SWEEP_SPLITS

    parser.add_argument("--warmup-ms", type=float, default=25.0)
    parser.add_argument("--rep-ms", type=float, default=100.0)
    parser.add_argument("--splits", type=_positive_ints, default=SWEEP_SPLITS,
                        metavar="S,S,...", help=f"split_k degrees to sweep (default {','.join(map(str, SWEEP_SPLITS))})")
    parser.add_argument("--first-tile-only", action="store_true",
                        help="sweep only each family's (and merge degree's) preferred tile: quicker")
    parser.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True,
                        help="time CUDA-graph replays, the kernels without host dispatch (default on)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="progress on stderr: a bar on a terminal, else one line per config (default on)")
    parser.add_argument("--allow-slow", action="store_true",
                        help=f"without a GPU, run shapes over {INTERPRETER_MAX_MACS:,} multiply-adds too: the "
                             "Triton interpreter takes hours over a full-size layer")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="verify and time every admissible config; rank them")
    _add_problem_args(bench, demo=True)
    bench.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    bench.add_argument("--family", default=None,
                       help="sweep only this family's configs (e.g. wgrad_shifted, wgrad_direct); the planned config is timed beside them")
    _add_timing_args(bench)
    bench.set_defaults(func=cmd_bench)

    sweep = sub.add_parser("sweep", help="verify and time every admissible config of every shape in a CSV",
                           description="Verify and time every admissible config of every shape in a CSV. Under "
                                       "torchrun (--nproc_per_node N) each rank sweeps every N-th shape on its own "
                                       "GPU (LOCAL_RANK) and rank 0 merges the ranks' rows into --output, in the "
                                       "shapes file's order.")
    sweep.add_argument("shapes", help="CSV of shapes (see --help of bench for the keys)")
    sweep.add_argument("-o", "--output", required=True, help="results CSV (rewritten after every shape)")
    sweep.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp32"))
    sweep.add_argument("--layout", default="channels_last", choices=("contiguous", "channels_last"))
    sweep.add_argument("--resume", action="store_true", help="skip shapes already in the output; append the rest")
    sweep.add_argument("--shard", type=_shard, default=(0, 1),
                       metavar="I/N", help="sweep every N-th shape starting at I, from 0 (split a corpus over calls)")
    sweep.add_argument("--reference-on-device", action="store_true",
                       help="compute the float64 reference on the GPU (faster on large layers)")
    sweep.add_argument("--confirm-from", metavar="RESULTS", action="append",
                       help="time only the current plan beside each shape's oracle, best Gm=1 and torch configs "
                            "from an earlier results file: scores a revised policy by measurement; repeat it for "
                            "a sweep and its confirm files (a shape in a later file replaces it in earlier ones)")
    sweep.add_argument("--changed-only", action="store_true",
                       help="with --confirm-from: only the shapes whose plan differs from that file's")
    sweep.add_argument("--launch", choices=("eager", "graph"), default="eager",
                       help="the plan marked as planned (and compared by --changed-only): for eager calls (default), "
                            "or for kernels launched from CUDA graphs, where the router weighs kernel time only")
    sweep.add_argument("--verify-only", action="store_true",
                       help="verify (and so compile) every config without timing: run several shards of this in "
                            "parallel to warm Triton's kernel cache before one timed sweep")
    _add_timing_args(sweep)
    sweep.set_defaults(func=cmd_sweep)

    scorer = sub.add_parser("score", help="score the policy against the oracle from sweep results")
    scorer.add_argument("results", nargs="+",
                        help="results CSVs written by `convwgrad sweep`; a shape in a later file replaces it in earlier ones")
    scorer.add_argument("--plot", metavar="PNG", help="write per-shape speedups, sorted, as a PNG")
    scorer.add_argument("--json", action="store_true")
    scorer.add_argument("--replan", action="store_true",
                        help="score the policy of the code as it is now (not the sweep's planned rows), from the "
                             "configs the sweep measured; no GPU needed")
    scorer.add_argument("--launch", choices=("eager", "graph"), default="eager",
                        help="with --replan: the plan for eager calls (default), or for launches from CUDA graphs, "
                             "where the router weighs kernel time only (the sweep's timings)")
    scorer.add_argument("--tuning-cache", metavar="JSON",
                        help="write each shape's fastest verified config (first results file) as a tuning cache")
    scorer.set_defaults(func=cmd_score)

    explain = sub.add_parser("explain", help="every candidate with its verdict, and the choice")
    _add_problem_args(explain, demo=False)
    explain.add_argument("--target", default=None, help="sm_90, gfx950, ... (default: this machine)")
    explain.add_argument("--launch", choices=("eager", "graph"), default="eager",
                         help="how the kernels are launched: eager calls (default), or replayed from CUDA graphs "
                              "(torch.compile mode='reduce-overhead', torch.cuda.graph), where only kernel time counts")
    _add_pin_args(explain)
    explain.set_defaults(func=cmd_explain)

    comp = sub.add_parser("compile", help="compile the planned kernels for a target and read the ISA")
    _add_problem_args(comp, demo=False)
    comp.add_argument("--target", default="gfx950", help="gfx950 (default), gfx942 or sm_90")
    _add_pin_args(comp)
    comp.set_defaults(func=cmd_compile)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning while a command runs (a tuning cache ignored, say) as one line, like an error."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("bench", "sweep") and "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            # Must be set before the kernels' module is imported (when the plugins load).
            os.environ["TRITON_INTERPRET"] = "1"
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return args.func(args)
        except (_UsageError, ValueError) as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
