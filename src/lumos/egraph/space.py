"""SearchSpace: the saturated e-graph as search sees it.

E-classes (ids 0..n-1 after read-back) each hold alternative e-nodes; an
e-node is an op, its decoded fields and its child e-classes. Every class and
e-node also has a stable `key` (our own fingerprint, never an egglog id), so a
choice can be saved and re-applied in another process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ENode:
    op: str                    # an HLIR op ("Add", "Input", ...) or a backend kernel op
    fields: tuple[Any, ...]    # decoded, hashable fields (shape, views, axis, dtype, ...)
    children: tuple[int, ...]  # child e-class ids


@dataclass
class SearchSpace:
    classes: list[list[ENode]]  # class id -> its alternatives, in a deterministic order
    root: int
    class_keys: list[str] = field(default_factory=list)  # class id -> stable fingerprint
    # the schedule's RulesetRuns (for lumos viz; not part of what the space is)
    saturation: list[Any] = field(default_factory=list, compare=False, repr=False)
    # why saturation stopped at its time limit, or None (Runner.timed_out)
    timed_out: str | None = field(default=None, compare=False, repr=False)

    def enode_key(self, cls: int, i: int) -> str:
        """Stable fingerprint of alternative i of class cls: op, fields, child class keys."""
        n = self.classes[cls][i]
        text = repr((n.op, n.fields, tuple(self.class_keys[c] for c in n.children)))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def reachable(self, choice: dict[int, int] | None = None) -> list[int]:
        """Classes reachable from the root: through every alternative (choice=None) or
        only through the chosen ones."""
        seen: set[int] = set()
        order: list[int] = []
        stack = [self.root]
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            order.append(c)
            nodes = self.classes[c] if choice is None else [self.classes[c][choice[c]]]
            for n in nodes:
                stack.extend(n.children)
        return order

    @property
    def num_enodes(self) -> int:
        return sum(len(c) for c in self.classes)
