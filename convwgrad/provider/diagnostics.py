"""Warnings that point at the user's line, not into convwgrad or pluggy.

A warning raised inside a hook (the tuning cache, the plugin manager) sits several
frames below the user's call, with pluggy's own frames in between, and how many depends
on the path taken (``plan()``, ``conv2d_weight``, a patched layer). A fixed
``stacklevel`` would name a line of pluggy; :func:`warn_at_caller` walks out instead.
Python 3.12's ``warnings.warn(..., skip_file_prefixes=...)`` does this, but we support 3.11.
"""

from __future__ import annotations

import os
import sys
import warnings

import pluggy

#: Code whose frames are never the place to blame: this package and the plugin machinery.
INTERNAL_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # convwgrad/
    os.path.dirname(os.path.abspath(pluggy.__file__)) + os.sep,  # pluggy/
)


def _is_internal(frame) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(INTERNAL_DIRS)


def _is_import_machinery(frame) -> bool:
    # warnings.warn skips these frames when it counts stacklevel, so the count here must too
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _outer(frame):
    frame = frame.f_back
    while frame is not None and _is_import_machinery(frame):
        frame = frame.f_back
    return frame


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the calling function name the first
    frame outside convwgrad and pluggy (the outermost frame if every one is internal)."""
    frame, level = _outer(sys._getframe(1)), 2  # level 1 is the function that asks
    while frame is not None and _is_internal(frame):
        outer = _outer(frame)
        if outer is None:
            break
        frame, level = outer, level + 1
    return level


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line that led here."""
    warnings.warn(message, category, stacklevel=_caller_stacklevel())
