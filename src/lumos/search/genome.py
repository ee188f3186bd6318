"""Genomes: one chosen e-node per e-class reachable from the root.

A genome is a `dict[int, int]` (class id -> index of the chosen alternative) over
exactly the classes its own choices reach from the root. Choices can form cycles
(`x = recip(recip(x))` puts x's class and the recip classes in a loop), so every genome
is made by `Genomes.repair`, which fills in missing choices at random and breaks cycles.

Breaking cycles, and why it terminates: a class's *rank* is the height of its lowest
acyclic program (0 for a leaf; classes without any acyclic program have none and are
never chosen into). An alternative is *safe* when all its children rank below its class.
Safe choices strictly lower the rank along every edge, so a cycle always holds a class
with an unsafe choice; repair re-picks the deepest such class on the cycle to a random
safe alternative and carries on. A class made safe is never re-picked, so there are at
most as many repairs as classes, and the rest of the genome keeps its random choices.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable

from lumos.egraph.space import ENode, SearchSpace
from lumos.errors import LumosError

Genome = dict[int, int]


class SearchError(LumosError):
    """The search space has no usable program, or a genome does not describe one."""


def genome_key(genome: Genome) -> tuple[tuple[int, int], ...]:
    """A hashable identity of a genome (over its reachable classes)."""
    return tuple(sorted(genome.items()))


def extract(space: SearchSpace, genome: Genome) -> list[tuple[int, ENode]]:
    """The chosen program: (class id, e-node) for every reachable class, children first."""
    order: list[tuple[int, ENode]] = []
    state: dict[int, bool] = {}  # class -> finished (False while on the DFS path)
    stack = [(space.root, 0)]
    while stack:
        c, i = stack.pop()
        if i == 0:
            if c in state:
                if not state[c]:
                    raise SearchError(f"genome has a cycle through e-class {c}")
                continue
            if not 0 <= genome.get(c, -1) < len(space.classes[c]):
                raise SearchError(f"genome has no valid choice for reachable e-class {c}")
            state[c] = False
        node = space.classes[c][genome[c]]
        if i < len(node.children):
            stack += [(c, i + 1), (node.children[i], 0)]
        else:
            state[c] = True
            order.append((c, node))
    return order


class Genomes:
    """Random genomes, mutation, repair and program fingerprints over one SearchSpace."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.rank = _ranks(space)
        inf = float("inf")
        self.grounded: list[list[int]] = []  # alternatives whose children all have a rank
        self.safe: list[list[int]] = []      # alternatives whose children all rank lower
        for c, nodes in enumerate(space.classes):
            hi = [max((self.rank[k] for k in n.children), default=-1) for n in nodes]
            self.grounded.append([i for i, h in enumerate(hi) if h < inf])
            self.safe.append([i for i, h in enumerate(hi) if h < self.rank[c]])
        if self.rank[space.root] == inf:
            bad = [c for c in space.reachable() if self.rank[c] == inf]
            raise SearchError(
                f"the e-graph has no acyclic program: every alternative of the root e-class "
                f"{space.root} leads into a cycle; {len(bad)} reachable e-classes have no "
                f"acyclic choice, e.g. {_describe(space, bad[:3])}")
        self._local: dict[tuple[int, int], bytes] = {}

    def baseline(self, rng: random.Random) -> Genome:
        """Each class's first acyclic alternative (the original program when the e-graph
        lists it first), repaired if those choices cycle."""
        return self.repair({c: g[0] for c, g in enumerate(self.grounded) if g}, rng)

    def preferring(self, cost: Callable[[int, ENode], float], rng: random.Random) -> Genome:
        """Each class's acyclic alternative of least `cost(class, e-node)` (ties: the
        first), repaired if those choices cycle: a seed from a backend's rule of thumb."""
        nodes = self.space.classes
        return self.repair({c: min(g, key=lambda i, c=c: cost(c, nodes[c][i]))
                            for c, g in enumerate(self.grounded) if g}, rng)

    def random(self, rng: random.Random) -> Genome:
        return self.repair({}, rng)

    def mutate(self, genome: Genome, rng: random.Random, count: int) -> Genome:
        """Re-pick `count` reachable classes (those with a choice to make), then repair."""
        g = dict(genome)
        open_ = [c for c in g if len(self.grounded[c]) > 1]
        for c in rng.sample(open_, min(count, len(open_))):
            g[c] = rng.choice([i for i in self.grounded[c] if i != g[c]])
        return self.repair(g, rng)

    def repair(self, choice: Genome, rng: random.Random) -> Genome:
        """An acyclic genome that keeps `choice` where it can: missing choices and choices
        into no acyclic program are picked at random, cycles broken as described above,
        unreachable classes dropped. Returned in children-first order."""
        choice = dict(choice)
        done: Genome = {}
        pos: dict[int, int] = {}  # class on the DFS path -> its stack index
        stack: list[list[int]] = []

        def enter(c: int) -> None:
            if choice.get(c) not in self.grounded[c]:
                choice[c] = rng.choice(self.grounded[c])
            pos[c] = len(stack)
            stack.append([c, 0])

        enter(self.space.root)
        while stack:
            frame = stack[-1]
            c = frame[0]
            kids = self.space.classes[c][choice[c]].children
            if frame[1] == len(kids):
                stack.pop()
                del pos[c]
                done[c] = choice[c]
                continue
            k = kids[frame[1]]
            frame[1] += 1
            if k in done:
                continue
            if k not in pos:
                enter(k)
                continue
            # cycle stack[pos[k]:] -> k: re-pick its deepest unsafe class, resume there
            j = next(j for j in range(len(stack) - 1, pos[k] - 1, -1)
                     if choice[stack[j][0]] not in self.safe[stack[j][0]])
            ci = stack[j][0]
            choice[ci] = rng.choice(self.safe[ci])
            for f in stack[j + 1:]:
                del pos[f[0]]
            del stack[j + 1:]
            stack[j][1] = 0
        # drop classes finished under a choice that a later repair replaced
        return {c: done[c] for c, _ in extract(self.space, done)}

    def fingerprint(self, genome: Genome) -> str:
        """Structural hash of the extracted program (ops, fields, shape of the DAG): two
        genomes that choose the same program have the same fingerprint."""
        h: dict[int, bytes] = {}
        for c, node in extract(self.space, genome):
            local = self._local.get((c, genome[c]))
            if local is None:
                local = self._local[(c, genome[c])] = repr((node.op, node.fields)).encode()
            h[c] = hashlib.blake2b(local + b"".join(h[k] for k in node.children),
                                   digest_size=16).digest()
        return h[self.space.root].hex()


def _ranks(space: SearchSpace) -> list[float]:
    """Height of each class's lowest acyclic program (inf if it has none): Knuth's
    generalization of Dijkstra, since a node's rank 1 + max(children) is monotone."""
    n = len(space.classes)
    rank = [float("inf")] * n
    parents: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    waiting: dict[tuple[int, int], int] = {}  # (class, alternative) -> unranked children
    heap: list[tuple[float, int]] = []
    for c, nodes in enumerate(space.classes):
        for i, node in enumerate(nodes):
            kids = set(node.children)
            waiting[(c, i)] = len(kids)
            for k in kids:
                parents[k].append((c, i))
            if not kids:
                heap.append((0, c))
    heapq.heapify(heap)
    while heap:
        r, c = heapq.heappop(heap)
        if rank[c] < float("inf"):
            continue
        rank[c] = r
        for p, i in parents[c]:
            waiting[(p, i)] -= 1
            if waiting[(p, i)] == 0 and rank[p] == float("inf"):
                kids = space.classes[p][i].children
                heapq.heappush(heap, (1 + max(rank[k] for k in kids), p))
    return rank


def _describe(space: SearchSpace, classes: list[int]) -> str:
    return ", ".join(f"e-class {c} ({'/'.join(sorted({n.op for n in space.classes[c]}))})"
                     for c in classes)
