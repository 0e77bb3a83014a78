"""Kernel building blocks the dW families import; no family imports another's.

- :mod:`.jit`: the shared ``@triton.jit`` helpers: tap decoding, the tile accumulation, the
  ordered split-K reduction (stage 2).
- :mod:`.launch`: workspace layout and size, stage-1/stage-2 arguments, the wide-index
  policy and offset checks, grid checks, prepare/run/compile of the two stages, the direct launch.
- :mod:`.checks`: the support refusals tiled families share, TF32 admission, launch defaults.
- :mod:`.generated`: kernels generated as source (unrolled bodies), written to a file once and
  imported (Triton and Gluon read a kernel's source from its file).
- :mod:`.aten`: the refusals and bound launch of the families that compute dW in one call of
  torch's own backward (no Triton).
- :mod:`.nvrtc`: CUDA C++ kernels built at run time (the NVRTC build, the load into torch's
  context, the driver-API launch) for the families written in CUDA C++.

Part of the provider core: it imports no plugin or selector. This ``__init__`` imports
nothing; import the submodule you need.
"""
