"""`convwgrad score --replan` as the GPU machine would plan: the NVRTC families (shifted-MMA, short-1-D)
refuse every problem where cuda-bindings is not importable, which on a CPU-only machine makes the
replanned policy differ from the one the sweep ran under. Here their bindings check is answered as
on the GPU machine (importable); nothing is built or launched, so only the plans change.

Usage: python tools/score_as_gpu.py RESULTS.csv [...]
"""

import sys

from convwgrad import cli
from convwgrad.plugins.wgrad_shifted_mma import launcher as shifted_mma_launcher
from convwgrad.plugins.wgrad_short1d import launcher as short1d_launcher


def _importable():
    return (None, None), None


if __name__ == "__main__":
    shifted_mma_launcher._bindings = short1d_launcher._bindings = _importable
    sys.exit(cli.main(["score", "--replan", *sys.argv[1:]]))
