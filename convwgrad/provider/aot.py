"""Ahead-of-time compilation: build a plan's kernels for a target with no GPU, and read the ISA.

``compile(problem, "gfx950")`` plans for the offline profile and hands each
kernel to Triton's compiler; nothing is launched, so it runs on any machine.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import re
import subprocess
import sys
import tempfile

import attrs

from .manager import get_plugin_manager
from .plan import plan as make_plan
from .problem import ConvProblem
from .target import PROFILES, interpreter_enabled, resolve_target

#: A compile of one family's kernels takes seconds; a hung compiler should not hang the caller.
COMPILE_TIMEOUT_S = 600

_TRITON_DTYPES = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}

#: Target backends Triton compiles to a GPU binary; the interpreter and the CPU run kernels, or
#: none, without one.
COMPILE_BACKENDS = ("cuda", "hip")


@attrs.frozen(kw_only=True)
class CompiledKernel:
    name: str  # the spec's kernel_name(), plus the stage for two-stage specs
    function: str  # the Triton function compiled
    target: str
    asm: dict  # Triton's assembly dict: "ttir", "ttgir", "llir", "ptx"/"amdgcn", "cubin"/"hsaco"

    def isa(self) -> "IsaSummary":
        return summarize_isa(self.asm)


def compile(problem: ConvProblem, target=None, **spec_overrides) -> list[CompiledKernel]:
    """Compile the kernels ``plan(problem, target, **spec_overrides)`` chooses, without launching.

    ``target`` is a profile name (``"gfx950"``, ``"sm_90"``), a device, or
    None for the current device. Returns one :class:`CompiledKernel` per kernel.
    """
    target = resolve_target(target)
    if target.backend not in COMPILE_BACKENDS:
        compiling = ", ".join(name for name, info in PROFILES.items() if info.backend in COMPILE_BACKENDS)
        raise ValueError(f"target {target.name} compiles nothing: Triton builds code for "
                         f"{' and '.join(COMPILE_BACKENDS)} targets only, and it is {target.backend}; "
                         f"targets that compile: {compiling} (or a GPU device)")
    if interpreter_enabled():
        return _compile_in_subprocess(problem, target, spec_overrides)
    chosen = make_plan(problem, target, **spec_overrides)
    compiled = get_plugin_manager().hook.convwgrad_compile(problem=problem, spec=chosen.spec, target=target)
    if compiled is None:
        raise RuntimeError(f"no plugin compiles family {chosen.family!r}")
    return list(compiled)


def _compile_in_subprocess(problem, target, spec_overrides) -> list[CompiledKernel]:
    """Compile in a fresh interpreter-free Python: with TRITON_INTERPRET=1 set at import, Triton's
    own standard-library functions are interpreted wrappers its compiler cannot use. The child
    builds the default plugin manager, so a manager installed with use_plugin_manager() is not seen."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    request = pickle.dumps((problem, target, spec_overrides))
    done = subprocess.run(
        [sys.executable, "-c", "from convwgrad.provider.aot import _compile_worker; _compile_worker()"],
        input=request, capture_output=True, env=env, timeout=COMPILE_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"compiling in a subprocess failed:\n{done.stderr.decode(errors='replace')[-4000:]}")
    result = pickle.loads(done.stdout)
    if isinstance(result, BaseException):
        raise result
    return result


def _compile_worker() -> None:
    problem, target, spec_overrides = pickle.loads(sys.stdin.buffer.read())
    try:
        result = compile(problem, target, **spec_overrides)
    except Exception as exc:  # ValueError of a refused pin goes back to the caller as itself
        result = exc
    sys.stdout.buffer.write(pickle.dumps(result))


def triton_compile(kernel, args, *, target, num_warps: int, num_stages: int, name: str) -> CompiledKernel:
    """Compile a ``@triton.jit`` kernel for ``target`` from its argument list.

    ``args`` is a sequence of ``(arg_name, value)`` in the kernel's order, where
    a value is a dtype name string prefixed with "*" for a pointer (``"*bf16"``),
    an int (typed i32/i64 by size, marked 16-divisible when it is), or
    ``Constexpr(value)``.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    # Under TRITON_INTERPRET=1 the decorator returns an interpreted wrapper;
    # compiling needs the real JIT function of the same Python source.
    fn = kernel if isinstance(kernel, JITFunction) else JITFunction(
        kernel.fn, do_not_specialize=getattr(kernel, "kwargs", {}).get("do_not_specialize"))
    names = list(fn.arg_names)
    unspecialised = {param.name for param in fn.params if param.do_not_specialize}
    if [a for a, _ in args] != names:
        raise ValueError(f"argument list {[a for a, _ in args]} does not match {fn.__name__}{names}")
    signature, constexprs, attrs_ = {}, {}, {}
    for index, (arg, value) in enumerate(args):
        if arg in unspecialised:  # as the JIT compiles a do_not_specialize argument: a plain int
            signature[arg] = "i64" if not -(2**31) <= value < 2**31 else "i32"
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value == 1:
            value = Constexpr(1)  # the JIT specializes ints equal to 1 the same way
        if isinstance(value, Constexpr):
            signature[arg] = "constexpr"
            constexprs[arg] = value.value
        elif isinstance(value, str):
            signature[arg] = value
            attrs_[(index,)] = [["tt.divisibility", 16]]  # torch allocations are 256-byte aligned
        else:
            signature[arg] = "i64" if not -(2**31) <= value < 2**31 else "i32"
            if value % 16 == 0:
                attrs_[(index,)] = [["tt.divisibility", 16]]
    gpu = GPUTarget(target.backend, int(target.arch) if target.backend == "cuda" else target.arch, target.warp_size)
    source_type = triton.compiler.ASTSource
    if _is_gluon(fn):  # a Gluon kernel (explicit layouts and shared memory) has its own front end
        from triton.experimental.gluon._runtime import GluonASTSource as source_type
    src = source_type(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs_)
    options = {"num_warps": num_warps, "num_stages": num_stages, **_fp_fusion_option()}
    compiled = triton.compile(src, target=gpu, options=options)
    return CompiledKernel(name=name, function=fn.__name__, target=target.name, asm=dict(compiled.asm))


def _is_gluon(fn) -> bool:
    try:
        from triton.experimental.gluon._runtime import GluonJITFunction
    except ImportError:  # a Triton without Gluon compiles no Gluon kernel
        return False
    return isinstance(fn, GluonJITFunction)


def _fp_fusion_option() -> dict:
    """The FP-fusion choice Triton's JIT makes for the kernels it launches, passed explicitly: the
    ISA read here is then the one that runs, and Triton 3.9 does not warn on every compile that
    TRITON_DEFAULT_FP_FUSION is unset (it warns only where the option is left to its default)."""
    try:
        from triton import knobs

        language = knobs.language
        return {"enable_fp_fusion": bool(language.default_fp_fusion and not language.force_disable_fp_fusion)}
    except (ImportError, AttributeError):  # Triton < 3.9: no such knobs and no warning; its default stands
        return {}


@attrs.frozen
class Constexpr:
    value: object


# ----------------------------------------------------------------- ISA reading
@attrs.frozen(kw_only=True)
class IsaSummary:
    isa: str  # "amdgcn" or "ptx"
    matrix_instructions: dict  # mnemonic -> count
    global_loads: dict  # bytes per load -> count (cp.async copies counted by their size)
    registers: int | None
    scratch_bytes: int | None

    @property
    def matrix_count(self) -> int:
        return sum(self.matrix_instructions.values())

    def __str__(self) -> str:
        mm = ", ".join(f"{k} x{v}" for k, v in sorted(self.matrix_instructions.items())) or "none"
        loads = ", ".join(f"{w}B x{n}" for w, n in sorted(self.global_loads.items())) or "none"
        return (
            f"{self.isa}: matrix [{mm}]; global loads [{loads}]; registers {self.registers}; "
            f"scratch {self.scratch_bytes} B"
        )


_AMD_LOAD = re.compile(r"^\s*(?:global|buffer)_load_(?:lds_)?(\w+)", re.M)
_AMD_MFMA = re.compile(r"^\s*(v_mfma\w+|v_smfmac\w+)", re.M)
_PTX_PRED = r"^\s*(?:@!?%\w+\s+)?"
_PTX_MMA = re.compile(_PTX_PRED + r"((?:wgmma\.mma_async|mma\.sync)[\w.]*)", re.M)
_PTX_LOAD = re.compile(_PTX_PRED + r"ld\.global((?:\.[\w:]+)*)\s", re.M)
_PTX_CP_ASYNC = re.compile(_PTX_PRED + r"cp\.async\.c[ag]\.shared\.global[^,;]*,[^,;]*,\s*(0x[0-9a-fA-F]+|\d+)", re.M)


def _amd_load_bytes(kind: str) -> int:
    """Bytes of one lane's load from the mnemonic's suffix: dwordx4 -> 16, ushort -> 2, ..."""
    if kind.startswith("dwordx"):
        return 4 * int(kind[6])
    if kind.startswith("dword") or kind in ("b32", "format_x"):
        return 4
    if "short" in kind or kind.startswith(("b16", "d16")):
        return 2
    if "byte" in kind:
        return 1
    width = re.match(r"b(\d+)", kind)
    return int(width.group(1)) // 8 if width else 0


def _ptx_load_bytes(suffixes: str) -> int:
    parts = suffixes.split(".")
    vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
    bits = next((int(p[1:]) for p in reversed(parts) if re.fullmatch(r"[bfsu]\d+", p)), 0)
    return vec * bits // 8


def summarize_isa(asm: dict) -> IsaSummary:
    if "amdgcn" in asm:
        text = asm["amdgcn"]
        loads = collections.Counter()
        for kind in _AMD_LOAD.findall(text):
            loads[_amd_load_bytes(kind)] += 1
        vgprs = re.search(r"^\s*;\s*NumVgprs:\s*(\d+)", text, re.M)
        scratch = re.search(r"^\s*;\s*ScratchSize:\s*(\d+)", text, re.M)
        return IsaSummary(
            isa="amdgcn",
            matrix_instructions=dict(collections.Counter(_AMD_MFMA.findall(text))),
            global_loads=dict(loads),
            registers=int(vgprs.group(1)) if vgprs else None,
            scratch_bytes=int(scratch.group(1)) if scratch else None,
        )
    text = asm["ptx"]
    loads = collections.Counter()
    for suffixes in _PTX_LOAD.findall(text):
        loads[_ptx_load_bytes(suffixes)] += 1
    for size in _PTX_CP_ASYNC.findall(text):
        loads[int(size, 0)] += 1
    registers, stack = _cubin_resources(asm.get("cubin"))
    return IsaSummary(
        isa="ptx",
        matrix_instructions=dict(collections.Counter(_PTX_MMA.findall(text))),
        global_loads=dict(loads),
        registers=registers,
        scratch_bytes=stack,
    )


def _cubin_resources(cubin: bytes | None) -> tuple[int | None, int | None]:
    """Registers and stack bytes from Triton's bundled cuobjdump; (None, None) when unavailable."""
    if not cubin:
        return None, None
    try:
        import triton

        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    except Exception:
        return None, None
    reg = re.search(r"REG:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    return (int(reg.group(1)) if reg else None, int(stack.group(1)) if stack else None)
