"""The ``convwgrad`` command: bench, sweep, score, explain, compile."""

from __future__ import annotations

import argparse
import json
import os
import sys


def _problems(args) -> list:
    from .shapes import CPU_DEMO, GPU_DEMO, parse_shape, read_csv

    defaults = {"dtype": args.dtype, "layout": args.layout}
    problems = [parse_shape(s, **defaults) for s in args.shape or ()]
    for path in args.csv or ():
        problems += read_csv(path, **defaults)
    if not problems and getattr(args, "demo_ok", False):
        import torch

        demo = GPU_DEMO if torch.cuda.is_available() else CPU_DEMO
        problems = [parse_shape(s, **defaults) for s in demo]
    if not problems:
        raise SystemExit("give --shape KEY=VALUE,... or --csv FILE")
    return problems


def _add_problem_args(parser, *, demo: bool):
    parser.add_argument("--shape", action="append", metavar="SPEC",
                        help="e.g. N=32,C=144,H=56,W=56,k=3,s=1,g=144 (repeatable)")
    parser.add_argument("--csv", action="append", metavar="FILE", help="a CSV file with one shape per row")
    parser.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp32"))
    parser.add_argument("--layout", default="channels_last", choices=("contiguous", "channels_last"))
    parser.set_defaults(demo_ok=demo)


def cmd_bench(args) -> int:
    import torch

    from .bench import ProgressBar, bench_problem, format_table

    problems = _problems(args)
    if not torch.cuda.is_available():
        print("no GPU found: running the kernels through the Triton interpreter on the CPU; "
              "timings there mean nothing", file=sys.stderr)
    results = []
    for label, problem in problems:
        progress = ProgressBar(label, enabled=args.progress)
        result = bench_problem(label, problem, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=progress,
                               splits=args.splits, first_tile_only=args.first_tile_only, graph=args.graph)
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

    problems = read_csv(args.shapes, dtype=args.dtype, layout=args.layout)
    index, count = args.shard
    problems = problems[index::count]
    if args.resume:
        done = measured_shapes(args.output)
        problems = [(label, p) for label, p in problems if label not in done]
        print(f"resuming: {len(done)} shapes already in {args.output}, {len(problems)} to go", file=sys.stderr)
    if not torch.cuda.is_available():
        print("no GPU found: the sweep runs through the Triton interpreter; its timings mean nothing", file=sys.stderr)
    confirm = None
    if args.confirm_from:
        problems, confirm = _confirm_selection(args, problems)
    results = []
    for label, problem in problems:
        progress = ProgressBar(label, enabled=args.progress)
        result = bench_problem(label, problem, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, progress=progress,
                               splits=args.splits, first_tile_only=args.first_tile_only, graph=args.graph,
                               reference_on_device=args.reference_on_device, timed=not args.verify_only,
                               specs=confirm[label] if confirm else None)
        # one shape at a time, appended, so a sweep cut off by a time limit keeps what it measured
        write_results([result], args.output, append=args.resume or bool(results))
        results.append(result)
    failed = sum(len(r.failed()) for r in results)
    print(f"{len(problems)} shapes, {sum(len(r.results) for r in results)} configs, {failed} failed verification "
          f"-> {args.output}")
    return 1 if failed else 0


def _confirm_selection(args, problems):
    """The shapes ``--confirm-from`` re-times (all of that file's, or those whose plan changed
    with ``--changed-only``) and, per shape, the reference configs to time beside the plan."""
    import torch

    from .provider.plan import plan as make_plan
    from .provider.spec import spec_from_dict
    from .provider.target import current_target
    from .scoring import planned_specs, reference_specs

    confirm = {shape: [spec_from_dict(d) for d in dicts] for shape, dicts in reference_specs(args.confirm_from).items()}
    problems = [(label, p) for label, p in problems if label in confirm]
    if args.changed_only:
        before = planned_specs(args.confirm_from)
        target = current_target("cuda" if torch.cuda.is_available() else "cpu")
        problems = [(label, p) for label, p in problems
                    if label not in before or make_plan(p, target).spec != spec_from_dict(before[label])]
        print(f"{len(problems)} shapes whose plan changed since {args.confirm_from}", file=sys.stderr)
    return problems, confirm


def cmd_score(args) -> int:
    import json as json_module

    from .scoring import format_score, plot, read_results, replan, score

    if args.replan:
        if len(args.results) != 1:
            raise SystemExit("--replan scores one sweep's results file")
        scores, unmeasured = replan(args.results[0])
        print(f"the current code's plan, looked up among the sweep's measured configs: {len(scores)} shapes; "
              f"{len(unmeasured)} planned a config the sweep did not time (re-time them with "
              f"`sweep --confirm-from {args.results[0]} --changed-only`){': ' if unmeasured else ''}"
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

    pins = {"split_k": args.split_k} if args.split_k else {}
    for label, problem in _problems(args):
        print(f"== {label}")
        print(explain(problem, args.target, **pins))
    return 0


def cmd_compile(args) -> int:
    from .provider.aot import compile as aot_compile

    pins = {"split_k": args.split_k} if args.split_k else {}
    for label, problem in _problems(args):
        print(f"== {label}: {problem.describe()} -> {args.target}")
        kernels = aot_compile(problem, args.target, **pins)
        if not kernels:
            print("   nothing to compile (the plan chose a family with no Triton kernel)")
        for kernel in kernels:
            print(f"   {kernel.name}\n      {kernel.isa()}")
    return 0


def _add_timing_args(parser):
    from .bench import SWEEP_SPLITS

    parser.add_argument("--warmup-ms", type=float, default=25.0)
    parser.add_argument("--rep-ms", type=float, default=100.0)
    parser.add_argument("--splits", type=lambda v: tuple(int(x) for x in v.split(",")), default=SWEEP_SPLITS,
                        metavar="S,S,...", help=f"split_k degrees to sweep (default {','.join(map(str, SWEEP_SPLITS))})")
    parser.add_argument("--first-tile-only", action="store_true",
                        help="sweep only each family's (and merge degree's) preferred tile: quicker")
    parser.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True,
                        help="time CUDA-graph replays, the kernels without host dispatch (default on)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="convwgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="verify and time every admissible config; rank them")
    _add_problem_args(bench, demo=True)
    bench.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    _add_timing_args(bench)
    bench.set_defaults(func=cmd_bench)

    sweep = sub.add_parser("sweep", help="verify and time every admissible config of every shape in a CSV")
    sweep.add_argument("shapes", help="CSV of shapes (see --help of bench for the keys)")
    sweep.add_argument("-o", "--output", required=True, help="results CSV (rewritten after every shape)")
    sweep.add_argument("--dtype", default="bf16", choices=("fp16", "bf16", "fp32"))
    sweep.add_argument("--layout", default="channels_last", choices=("contiguous", "channels_last"))
    sweep.add_argument("--resume", action="store_true", help="skip shapes already in the output; append the rest")
    sweep.add_argument("--shard", type=lambda v: tuple(int(x) for x in v.split("/")), default=(0, 1),
                       metavar="I/N", help="sweep every N-th shape starting at I (split a corpus over calls)")
    sweep.add_argument("--reference-on-device", action="store_true",
                       help="compute the float64 reference on the GPU (faster on large layers)")
    sweep.add_argument("--confirm-from", metavar="RESULTS",
                       help="time only the current plan beside each shape's oracle, best Gm=1 and torch configs "
                            "from an earlier results file: scores a revised policy by measurement")
    sweep.add_argument("--changed-only", action="store_true",
                       help="with --confirm-from: only the shapes whose plan differs from that file's")
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
    scorer.add_argument("--tuning-cache", metavar="JSON",
                        help="write each shape's fastest verified config (first results file) as a tuning cache")
    scorer.set_defaults(func=cmd_score)

    explain = sub.add_parser("explain", help="every candidate with its verdict, and the choice")
    _add_problem_args(explain, demo=False)
    explain.add_argument("--target", default=None, help="sm_90, gfx950, ... (default: this machine)")
    explain.add_argument("--split-k", type=int, default=None, help="pin the split-K degree")
    explain.set_defaults(func=cmd_explain)

    comp = sub.add_parser("compile", help="compile the planned kernels for a target and read the ISA")
    _add_problem_args(comp, demo=False)
    comp.add_argument("--target", default="gfx950", help="gfx950 (default), sm_90, ...")
    comp.add_argument("--split-k", type=int, default=None, help="pin the split-K degree")
    comp.set_defaults(func=cmd_compile)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("bench", "sweep") and "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            # Must be set before the kernels' module is imported (when the plugins load).
            os.environ["TRITON_INTERPRET"] = "1"
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"convwgrad: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
