"""What the kernels run on: compute units, L2 domains, grid limits.

Offline profiles let planning and compilation run on a machine with no GPU.
"""

from __future__ import annotations

import functools
import os

import attrs
from attrs import field
from attrs.validators import in_

from .problem import _positive_int

#: Backends a target can have. "interpreter" runs Triton kernels on the CPU
#: (TRITON_INTERPRET=1); "cpu" has no Triton path at all.
BACKENDS = ("cuda", "hip", "interpreter", "cpu")

#: CUDA's launch limits: 2**31-1 blocks on x, 65535 on y and z. HIP documents
#: the same y/z limit and a wider x; we keep CUDA's so one plan fits both.
GRID_LIMITS = (2**31 - 1, 65535, 65535)

#: How a plan's kernels are launched, which decides what a router may weigh. "eager": each call
#: launches from the host, inside autograd's engine thread in a backward, so the host time a
#: patched layer adds is part of what the layer costs (and, in the host-bound eager steps measured
#: on the H200 machine, all of it). "graph": the launches are replayed from a CUDA graph
#: (``torch.compile(mode="reduce-overhead")``, ``torch.cuda.graph``), so only kernel time counts.
#: The dispatcher takes a call's plan for "graph" when the current stream is capturing and that
#: plan was warmed outside the capture (see :func:`convwgrad.provider.dispatch.conv_weight`).
LAUNCHES = ("eager", "graph")


@attrs.frozen(kw_only=True, cache_hash=True)
class TargetInfo:
    name: str  # "sm_90", "gfx950", "interpreter", ...
    backend: str = field(validator=in_(BACKENDS))
    arch: str  # Triton's arch: "90" for CUDA, "gfx950" for HIP
    compute_units: int = field(validator=_positive_int)  # SMs or CUs
    l2_domains: int = field(default=1, validator=_positive_int)  # XCDs on CDNA3+
    warp_size: int = field(default=32, validator=_positive_int)
    #: warps (wavefronts) one compute unit holds at once: 64 on Hopper SMs, 32 on CDNA CUs
    #: (8 per SIMD x 4); with a kernel's warps per program it sizes one wave of programs
    max_warps_per_cu: int = field(default=64, validator=_positive_int)
    max_grid: tuple[int, int, int] = GRID_LIMITS
    has_matrix_units: bool = True
    device_name: str = ""
    #: one of :data:`LAUNCHES`
    launch: str = field(default="eager", validator=in_(LAUNCHES))

    @property
    def runs_triton(self) -> bool:
        return self.backend != "cpu"

    def __str__(self) -> str:
        extra = f", {self.l2_domains} L2 domains" if self.l2_domains > 1 else ""
        dev = f" ({self.device_name})" if self.device_name else ""
        launch = ", launched from CUDA graphs" if self.launch == "graph" else ""
        return f"{self.name}{dev}: {self.backend}, {self.compute_units} CUs{extra}, warp {self.warp_size}{launch}"


#: Offline profiles. sm_90: H100/H200 SXM, 132 SMs. gfx950: MI350-class,
#: 256 CUs over 8 XCDs, wave64.
PROFILES: dict[str, TargetInfo] = {
    "sm_90": TargetInfo(name="sm_90", backend="cuda", arch="90", compute_units=132, warp_size=32),
    "gfx950": TargetInfo(
        name="gfx950", backend="hip", arch="gfx950", compute_units=256, l2_domains=8, warp_size=64,
        max_warps_per_cu=32,
    ),
    "gfx942": TargetInfo(
        name="gfx942", backend="hip", arch="gfx942", compute_units=304, l2_domains=8, warp_size=64,
        max_warps_per_cu=32,
    ),
    "interpreter": TargetInfo(
        name="interpreter", backend="interpreter", arch="interpreter", compute_units=1
    ),
    "cpu": TargetInfo(name="cpu", backend="cpu", arch="cpu", compute_units=1, has_matrix_units=False),
}


def profile(name: str) -> TargetInfo:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown target profile {name!r}; known: {', '.join(PROFILES)}") from None


@functools.lru_cache(maxsize=None)
def launched(target: TargetInfo, launch: str) -> TargetInfo:
    """``target`` with its kernels launched as ``launch`` (one of :data:`LAUNCHES`)."""
    if launch not in LAUNCHES:
        raise ValueError(f"launch={launch!r}: one of {', '.join(LAUNCHES)}")
    return target if target.launch == launch else attrs.evolve(target, launch=launch)


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def hip_probe(device_index: int = 0) -> TargetInfo | str:
    """Ask the ROCm runtime through hip-python; a string "unavailable: <reason>" if it cannot."""
    try:
        from hip import hip  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a broken ROCm install raising anything
        return f"unavailable: hip-python cannot be imported ({type(exc).__name__}: {exc})"
    try:
        attr = hip.hipDeviceAttribute_t

        def query(name):
            err, value = hip.hipDeviceGetAttribute(getattr(attr, name), device_index)
            if err != hip.hipError_t.hipSuccess:
                raise RuntimeError(f"hipDeviceGetAttribute({name}) returned {err}")
            return value

        cus = query("hipDeviceAttributeMultiprocessorCount")
        warp = query("hipDeviceAttributeWarpSize")
        xccs = query("hipDeviceAttributeNumberOfXccs") if hasattr(attr, "hipDeviceAttributeNumberOfXccs") else 1
        err, props = hip.hipGetDeviceProperties(device_index)
        if err != hip.hipError_t.hipSuccess:
            raise RuntimeError(f"hipGetDeviceProperties returned {err}")
        raw = props.gcnArchName
        arch = (raw.decode() if isinstance(raw, bytes) else str(raw)).split(":")[0]
    except Exception as exc:
        return f"unavailable: {type(exc).__name__}: {exc}"
    return TargetInfo(
        name=arch, backend="hip", arch=arch, compute_units=cus, l2_domains=max(1, xccs), warp_size=warp,
        max_warps_per_cu=32,
    )


@functools.lru_cache(maxsize=None)
def _device_target(device_type: str, index: int) -> TargetInfo:
    import torch

    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        probed = hip_probe(index)
        if isinstance(probed, TargetInfo):
            return attrs.evolve(probed, device_name=props.name)
        arch = getattr(props, "gcnArchName", "gfx").split(":")[0]
        known = PROFILES.get(arch)
        return TargetInfo(
            name=arch,
            backend="hip",
            arch=arch,
            compute_units=props.multi_processor_count,
            l2_domains=known.l2_domains if known else 1,
            warp_size=64,
            max_warps_per_cu=32,
            device_name=props.name,
        )
    return TargetInfo(
        name=f"sm_{props.major}{props.minor}",
        backend="cuda",
        arch=f"{props.major}{props.minor}",
        compute_units=props.multi_processor_count,
        warp_size=32,
        has_matrix_units=props.major >= 8,
        device_name=props.name,
    )


def current_target(device=None) -> TargetInfo:
    """The target of ``device`` (a torch device, string or None for the current CUDA device or CPU)."""
    import torch

    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    index = device.index if device.index is not None else (
        torch.cuda.current_device() if device.type == "cuda" else 0
    )
    if device.type != "cuda":
        return PROFILES["interpreter"] if interpreter_enabled() else PROFILES["cpu"]
    return _device_target(device.type, index)


#: Device types a target string may name; any other string is a profile name.
DEVICE_TYPES = ("cuda", "cpu")


def resolve_target(target) -> TargetInfo:
    """A TargetInfo from a TargetInfo, a profile name, a device, or None (the current device)."""
    if isinstance(target, TargetInfo):
        return target
    if target is None:
        return current_target(None)
    if isinstance(target, str) and target.split(":")[0] not in DEVICE_TYPES:
        return profile(target)
    return current_target(_device(target))  # a device: "cpu" means this process's CPU path


def _device(target):
    """``target`` (a device string or torch.device) as a torch.device this process has;
    an error naming ``target`` otherwise. An int is refused: torch reads 5 as cuda:5, which a
    caller of plan(problem, 5) rarely means."""
    import torch

    if not isinstance(target, (str, torch.device)):
        raise TypeError(f"target must be a TargetInfo, a profile name ({', '.join(PROFILES)}), a torch.device "
                        f"or a device string ({', '.join(DEVICE_TYPES)}), or None; got {target!r}")
    try:
        device = torch.device(target)
    except RuntimeError as exc:  # a malformed string such as "cuda:x"
        raise ValueError(f"target={target!r} is not a device: {exc}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"target={target!r}: this process has no CUDA (or ROCm) device")
        if device.index is not None and device.index >= count:
            raise ValueError(f"target={target!r}: this process has {count} CUDA device(s), 0 to {count - 1}")
    return device


def cudnn_conv_allows_tf32() -> bool:
    """Whether torch lets cuDNN convolutions round fp32 to TF32: what convwgrad's fp32 kernels follow.

    The legacy switch (``torch.backends.cudnn.allow_tf32``) answers unless the legacy and the
    per-operator API (torch >= 2.9) were mixed, where torch refuses to answer for "cuDNN" as a whole;
    then the convolution operator's own setting decides (``torch.backends.cudnn.conv.fp32_precision``,
    ``"none"`` inheriting cuDNN's, then torch's)."""
    try:
        return _legacy_cudnn_allow_tf32()
    except RuntimeError:
        import torch

        for precision in (getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None),
                          getattr(torch.backends.cudnn, "fp32_precision", None),
                          getattr(torch.backends, "fp32_precision", None)):
            if precision in ("tf32", "ieee"):
                return precision == "tf32"
        return True  # every level "none": cuDNN's default, TF32 on


def _legacy_cudnn_allow_tf32() -> bool:
    """torch's own getter behind ``torch.backends.cudnn.allow_tf32`` (~1 us cheaper than the property,
    which a warm call reads every time), looked up once."""
    global _legacy_getter
    if _legacy_getter is None:
        import torch

        _legacy_getter = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (lambda: torch.backends.cudnn.allow_tf32)
    return _legacy_getter()


_legacy_getter = None
