"""The native warm path: conv_weight's call signature -> prepared call, looked up in C++.

``warm_path.cpp`` beside this file mirrors the Python warm path of :mod:`convwgrad.provider.dispatch`
(the key, the planning-context check, the capture check) and runs a kept call without Python where
the call is a whole aten dW; other kept calls are the Python prepared calls, reached from C++.
Python stays the reference: a miss (a first call, anything the native key does not cover, a
capture, an open :func:`~convwgrad.record_launches` log) takes the Python path, which keeps the
call here too.

The extension is built from source with torch's own C++ extension builder (a C++ compiler and
ninja; about 15 s on a 2-core CPU), once per machine and torch version, in torch's extension
cache (``TORCH_EXTENSIONS_DIR``), in a process of its own (see :func:`_build`). The build never
blocks a call: the first prepared call starts it from a background thread, and calls take the
Python path until it is loaded. ``CONVWGRAD_NATIVE``
chooses: ``0`` off (the Python path only), ``1`` (the default) build in the background on first
use, ``wait`` build on first use and wait for it. :func:`load` builds and waits (tests, tools);
:func:`status` says what happened, and a failed build warns once with the compiler's reason.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ..diagnostics import warn_at_caller

#: off (0), background build on first use (1, the default), or build on first use and wait (wait)
NATIVE_ENV = "CONVWGRAD_NATIVE"
SOURCE = Path(__file__).with_name("warm_path.cpp")
#: the extension's module name (torch's builder versions it when the source changes)
EXTENSION_NAME = "convwgrad_warm_path"


class State(enum.Enum):
    IDLE = "not built yet: calls take the Python warm path"
    BUILDING = "building on a background thread: calls take the Python warm path until it loads"
    LOADED = "loaded"
    FAILED = "build failed: calls take the Python warm path"
    OFF = f"off ({NATIVE_ENV}=0): calls take the Python warm path"


#: ``call(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts,
#: keep_workspace) -> dW | None`` once the extension is loaded, else None: the dispatcher reads this
#: on every call, so it is a plain module attribute.
call = None
#: ``call_problem(problem, plan, input, grad_output) -> dW | None``: dispatch_conv_grouped's, likewise
call_problem = None
#: ``conv(input, weight, bias, stride, padding, dilation, groups, memo) -> output | None`` once loaded:
#: torch's convolution as a C++ autograd function whose backward launches dW's kernels from what
#: :func:`install` put in ``memo`` (a :func:`new_memo` capsule), or else calls :data:`backward_fallback`;
#: None back where a tensor is a subclass (the caller's Python function then)
conv = None
#: ``(memo_key, input, grad_output, weight, stride, padding, dilation, groups) -> dW``: the native
#: backward's Python path (set by ``frameworks.torch_ops``), called with the GIL on autograd's thread
backward_fallback = None
_module = None
#: the extension from the moment it is configured (before it is published as _module)
_configuring = None
_state = State.IDLE
_reason = ""
_lock = threading.Lock()
_built = threading.Event()
#: set by the dispatcher: (module) -> None, configures the loaded extension (where the planning
#: context lives is the dispatcher's knowledge, not this module's)
_configure = None


def mode() -> str:
    value = os.environ.get(NATIVE_ENV, "1").strip().lower()
    return value if value in ("0", "1", "wait") else "1"


def status() -> str:
    """What the native warm path is doing, in words (``explain``-style)."""
    if _state is State.LOADED:
        return f"{_state.value}: {_module.__file__}"
    if _state is State.FAILED:
        return f"{_state.value}; {_reason}"
    return _state.value


def is_loaded() -> bool:
    return _state is State.LOADED


#: Longest a build may take before it is given up (and its process group killed): the build took ~15 s
#: on the 2-core dev CPU (session 15), so this is 40 times that. A build lock older than this is one a
#: killed build left behind (torch's builder waits on it forever): the build process removes it.
BUILD_TIMEOUT_S = 600

#: What the build process runs: a stale lock removed, torch's builder (ninja, the compiler, its cache and
#: its lock), then the built module's path on the last line.
_BUILD_SCRIPT = """
import os, sys, time
from torch.utils import cpp_extension
source, name, stale_after = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    lock = os.path.join(cpp_extension._get_build_directory(name, verbose=False), "lock")
    if os.path.exists(lock) and time.time() - os.path.getmtime(lock) > stale_after:
        os.remove(lock)
        print(f"removed a stale build lock ({lock}), left by a build that was killed", file=sys.stderr)
except (AttributeError, OSError):  # a torch without that helper: its builder's own wait stands
    pass
module = cpp_extension.load(name=name, sources=[source], extra_cflags=["-O2"], verbose=False)
print(module.__file__)
"""


def _build():
    """Build in a process of its own and import what it built. Its own process, in a session of its
    own: torch's builder holds a lock file in the build folder while it builds, and a build killed
    with this process (a short script ending, Ctrl-C) would leave the lock behind, and every later
    build waiting on it; the child finishes and releases it whatever happens here."""
    environment = dict(os.environ)
    if shutil.which("ninja", path=environment.get("PATH")) is None:  # the ninja package's binary, off PATH
        try:
            import ninja
        except ImportError:
            pass
        else:
            environment["PATH"] = ninja.BIN_DIR + os.pathsep + environment.get("PATH", "")
    child = subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(SOURCE), EXTENSION_NAME, str(BUILD_TIMEOUT_S)],
                             env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the compiler and ninja with it (its own session)
        child.communicate()
        raise TimeoutError(f"the build took over {BUILD_TIMEOUT_S} s and was stopped") from None
    if child.returncode != 0:
        raise RuntimeError(stderr.strip() or f"the build process exited with {child.returncode}")
    path = stdout.strip().splitlines()[-1]
    name = Path(path).name.split(".")[0]  # torch's builder versions the name when the source changes
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_and_install() -> None:
    global _module, call, call_problem, conv, _state, _reason, _configuring
    try:
        module = _build()
        _configuring = module  # seen by open_logs_changed from here on: a log opened meanwhile is told
        if _configure is not None:
            _configure(module)
    except Exception as exc:  # no compiler, no ninja, a header mismatch: the Python path stands
        with _lock:
            lines = str(exc).strip().splitlines()[-5:]  # the compiler's last words
            _state, _reason = State.FAILED, f"{type(exc).__name__}: {' | '.join(lines)}"
        warn_at_caller(f"convwgrad: the native warm path could not be built, so calls take the Python warm path "
                       f"({_reason}); set {NATIVE_ENV}=0 to skip the build")
    else:
        with _lock:
            _module, _state = module, State.LOADED
            call, call_problem, conv = module.call, module.call_problem, module.conv
    finally:
        _built.set()


def start() -> None:
    """Start the build as :data:`NATIVE_ENV` says, once; returns at once unless it says ``wait``."""
    global _state
    with _lock:
        if _state is not State.IDLE:
            return
        if mode() == "0":
            _state = State.OFF
            return
        _state = State.BUILDING
    if mode() == "wait":
        _build_and_install()
    else:
        threading.Thread(target=_build_and_install, name="convwgrad-native-build", daemon=True).start()


def load(timeout: float | None = None):
    """Build (or find) the extension and wait for it; the loaded module, or None if the build
    failed or is off (:func:`status` says which). For tests and tools that must measure it."""
    global _state
    with _lock:
        if _state is State.OFF and mode() != "0":
            _state = State.IDLE
    start()
    if _state is State.BUILDING:
        _built.wait(timeout)
    return _module if _state is State.LOADED else None


def _started():
    """The loaded module, or None after starting the build if it was never started."""
    if _module is None and _state is State.IDLE:
        start()
    return _module


def keep(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts, prepared,
         aten_call) -> bool:
    """Keep a prepared call in the native table (see ``warm_path.cpp``'s ``keep``); starts the build
    on first use. False where nothing is kept: not loaded yet, or a signature it does not key."""
    module = _started()
    return module is not None and module.keep(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts,
                        prepared, aten_call)


def keep_problem(problem, plan, input, grad_output, prepared, aten_call) -> bool:
    """:func:`keep` for dispatch_conv_grouped's (problem, plan) objects, kept alive and keyed by identity."""
    module = _started()
    return module is not None and module.keep_problem(problem, plan, input, grad_output, prepared, aten_call)


def clear() -> None:
    if _module is not None:
        _module.clear()


def stats() -> tuple[int, int, int, int]:
    """(hits, misses, kept calls, planning-context changes) since the extension loaded; zeros before."""
    return (0, 0, 0, 0) if _module is None else _module.stats()


def run_backward_fallback(*arguments):
    """What the extension calls where a routed layer's backward cannot launch natively: the
    :data:`backward_fallback` set now (the extension may have loaded before it was set)."""
    if backward_fallback is None:
        raise RuntimeError("convwgrad: the native backward ran with no fallback set (import convwgrad.frameworks)")
    return backward_fallback(*arguments)


def new_memo(key: int):
    """A memo capsule for a patched layer's route, or None while the extension is not loaded; the
    fallback is called with ``key``."""
    return None if _module is None else _module.new_memo(key)


def install(memo, input, grad_output, weight, stages, workspace_nbytes: int) -> bool:
    """Put dW's launches (see ``warm_path.cpp``'s ``install``) for these tensors' metadata in ``memo``."""
    return _module is not None and _module.install(memo, input, grad_output, weight, stages, workspace_nbytes)


def open_logs_changed(count: int) -> None:
    """Tell the extension how many record_launches logs are open (it leaves dW to Python while any is);
    the caller holds the lock the configuration reads the count under."""
    if _configuring is not None:
        _configuring.set_open_logs(count)


def thread_enabled_changed(enabled: bool) -> None:
    """Tell the extension convwgrad's switch on this thread (``convwgrad.set_enabled``)."""
    if _module is not None:
        _module.set_thread_enabled(enabled)


def set_poison(on: bool) -> None:
    """Tests: fill dW and the workspace with NaN before each native launch (every element must be written)."""
    if _module is not None:
        _module.set_poison(on)


def backward_stats() -> tuple[int, int, bool] | None:
    """(routed backwards whose dW launched natively, those that took the fallback, whether the CUDA
    driver's entry points were found), or None while the extension is not loaded."""
    return None if _module is None else _module.backward_stats()
