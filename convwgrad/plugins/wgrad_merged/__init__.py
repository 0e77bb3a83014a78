"""Merged-group family (Gm adjacent depthwise groups per workgroup): not built yet.

Registers nothing until its kernels land, so the core never offers it.
"""
