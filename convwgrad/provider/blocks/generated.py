"""Kernels generated as source: written once to a file and imported.

Triton (and Gluon) read a kernel's source back from the file its function was defined in, so a
kernel whose body is generated (unrolled taps, no register arrays in Triton) must live in a real
module file. The text is keyed by its hash: a changed generator writes a new module, concurrent
processes write the same text atomically.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile

#: Where generated kernels are written (default: a per-user folder under the temp directory).
CACHE_DIR_ENV = "CONVWGRAD_GENERATED_DIR"


def generated_directory() -> str:
    path = os.environ.get(CACHE_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"convwgrad-generated-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def load_generated(source: str, module_prefix: str, kernel_name: str):
    """The object named ``kernel_name`` of the module whose text is ``source`` (written to
    ``<generated_directory()>/<module_prefix>_<hash>.py`` once, then imported)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"{module_prefix}_{digest}"
    path = os.path.join(generated_directory(), module_name + ".py")
    if not os.path.exists(path) or open(path).read() != source:
        scratch = f"{path}.{os.getpid()}.tmp"
        with open(scratch, "w") as file:
            file.write(source)
        os.replace(scratch, path)  # atomic: concurrent processes write the same text
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, kernel_name)
