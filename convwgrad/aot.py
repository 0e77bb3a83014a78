"""``convwgrad.aot.compile(problem, target, **spec_overrides)``: compile without launching."""

from .provider.aot import CompiledKernel, IsaSummary, compile, summarize_isa

__all__ = ["CompiledKernel", "IsaSummary", "compile", "summarize_isa"]
