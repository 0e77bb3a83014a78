"""The family registry plugins fill, and the choice a selector returns."""

from __future__ import annotations

import attrs

from .spec import KernelSpec


@attrs.frozen(kw_only=True)
class Family:
    name: str
    priority: int
    description: str
    #: whether the split-K selector chooses this family's split_k degree
    splits_k: bool = False
    #: the largest degree the family runs (its workspace bound); the selector stays within it
    max_split_k: int = 1


class FamilyRegistry:
    """Kernel families by name, highest priority first."""

    def __init__(self):
        self._families: dict[str, Family] = {}

    def add(self, name: str, *, priority: int, description: str, splits_k: bool = False,
            max_split_k: int = 1) -> None:
        if name in self._families:
            raise ValueError(f"kernel family {name!r} is registered twice")
        self._families[name] = Family(
            name=name, priority=priority, description=description, splits_k=splits_k, max_split_k=max_split_k
        )

    def __getitem__(self, name: str) -> Family:
        try:
            return self._families[name]
        except KeyError:
            raise ValueError(f"unknown kernel family {name!r}; registered: {', '.join(self.names())}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._families

    def names(self) -> list[str]:
        return [f.name for f in sorted(self._families.values(), key=lambda f: -f.priority)]

    def __iter__(self):
        return iter(sorted(self._families.values(), key=lambda f: -f.priority))


@attrs.frozen(kw_only=True)
class Choice:
    spec: KernelSpec
    rule: str  # which selection rule fired, for explain()
