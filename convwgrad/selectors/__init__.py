"""Built-in selectors: the split-K degree and the choice among admitted candidates.

Registered as one plugin; its hooks run last (``trylast``) so a third-party
selector can take the decision first.
"""

from __future__ import annotations

from convwgrad.provider.hookspecs import hookimpl

from .routing import select
from .splitk import choose_split_k
from .tuning import CACHE


@hookimpl(trylast=True)
def convwgrad_choose_split_k(problem, spec, target, base_programs, max_split_k):
    return choose_split_k(problem, spec, target, base_programs, max_split_k)


@hookimpl(trylast=True)
def convwgrad_select(problem, target, candidates, families):
    return select(problem, target, candidates, families)


@hookimpl(trylast=True)
def convwgrad_tuned_spec(problem, target):
    return CACHE.lookup(problem, target)
