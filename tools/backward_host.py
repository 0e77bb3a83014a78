"""Where a patched layer's backward spends host time (GPU machine): the same dW call made from the
main thread and from inside an autograd backward (which runs on the engine's device thread).

The first version of this tool timed a loop of backward() calls on a layer whose dW kernel takes
226 us (UniRepLKNet's 7x7 d2 branch): that loop was GPU-bound, so its "186 us inside backward
against 62 us from the main thread" was the kernel, not the host. Here each dW call is timed by
itself, wall (perf_counter) and CPU time of the calling thread (thread_time), on layers whose
kernels are shorter than the host path, and a cProfile of the calls made inside the backward
(enabled in the engine's thread: a profiler only sees its own thread) names the slow functions.

Usage: python tools/backward_host.py [--plugin FILE.py:NAME] [LAYER ...]   (names from tools/host_overhead.py LAYERS)
"""

import cProfile
import os
import pstats
import statistics
import sys
import time

import torch

import convwgrad
from host_overhead import LAYERS, tensors  # noqa: E402  (tools/ is the script's directory)

DEFAULT_LAYERS = ("replk-7-c1024-k13", "unirep-7-c640-k3-d5", "mbv2-7-c960-k3")


class Timed:
    """Calls ``fn``, keeping each call's wall and thread CPU microseconds (and a profile if asked)."""

    def __init__(self, fn):
        self.fn, self.wall, self.cpu, self.profile = fn, [], [], None

    def __call__(self):
        if self.profile is not None:
            self.profile.enable()
        wall, cpu = time.perf_counter(), time.thread_time()
        self.fn()
        self.cpu.append((time.thread_time() - cpu) * 1e6)
        self.wall.append((time.perf_counter() - wall) * 1e6)
        if self.profile is not None:
            self.profile.disable()

    def summary(self):
        return f"wall {statistics.median(self.wall):7.1f} us  thread cpu {statistics.median(self.cpu):7.1f} us"


def main(names):
    for name in names:
        x, weight, dy, stride, padding, dilation = tensors(*LAYERS[name])
        groups = x.shape[1]
        seed = torch.zeros((), device="cuda", requires_grad=True)
        main_dw = Timed(lambda: convwgrad.conv2d_weight(x, weight.shape, dy, stride, padding, dilation, groups))
        engine_dw = Timed(lambda: convwgrad.conv2d_weight(x, weight.shape, dy, stride, padding, dilation, groups))

        class WithDw(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t.clone()

            @staticmethod
            def backward(ctx, g):
                engine_dw()
                return g

        with convwgrad.record_launches() as log:
            main_dw()
        for timed, call in ((main_dw, main_dw), (engine_dw, lambda: WithDw.apply(seed).backward())):
            for _ in range(20):
                call()
            torch.cuda.synchronize()
            timed.wall.clear(), timed.cpu.clear()
            for _ in range(200):
                call()
                torch.cuda.synchronize()  # each call starts on an idle GPU: host time only
        print(f"{name}: family {log[-1].family}; per dW call, median of 200")
        print(f"  from the main thread        {main_dw.summary()}")
        print(f"  inside autograd's backward  {engine_dw.summary()}")
        for timed, label in ((main_dw, "main thread"), (engine_dw, "engine thread")):
            timed.profile = cProfile.Profile()
            for _ in range(100):
                (timed if timed is main_dw else (lambda: WithDw.apply(seed).backward()))()
            torch.cuda.synchronize()
            stats = pstats.Stats(timed.profile).stats
            top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:8]
            print(f"  cProfile own time per call, {label}:")
            for (path, line, func), (_, calls, own, _cum, _) in top:
                print(f"    {own / 100 * 1e6:7.1f} us  x{calls / 100:4.1f}  {os.path.basename(path)}:{line}({func})")


if __name__ == "__main__":
    names = sys.argv[1:]
    while names and names[0] == "--plugin":  # a route experiment, as tools/step_bench.py registers it
        from step_bench import register_plugin

        register_plugin(names[1])
        names = names[2:]
    main(names or DEFAULT_LAYERS)
