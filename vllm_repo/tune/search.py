"""The order tune measures candidates in, and what it makes of the measurements. Pure logic: ``size`` and ``measure``
are given (the estimator and a real server in tune, plain functions in the tests).

The search measures as few points as it can, one axis at a time from the best candidate so far:

1. vLLM's defaults (the baseline);
2. max_num_seqs, coarse then fine: every other value of the axis (and its last), then the values either side of the
   best of those;
3. max_num_batched_tokens the same way, with the best max_num_seqs;
4. each switch tried the other way on the best candidate, kept where it is better;
5. the layouts (tensor parallelism against more instances) with the best settings, where the host has the GPUs;
6. the best measured again (``confirmations`` times at most), its score the mean of its measurements. The best of a
   set of noisy measurements is the luckiest of them: measured once, a winner's figure is higher than the same
   settings give the next time (the measurements that showed it: bench/results/tune.md, "Why the search measures
   its best again"). Where the mean drops it below another candidate measured once, that one is measured again
   too, while confirmations are left.

``grid()`` measures every candidate of the same space instead (what a brute-force tuner does), to check the search
against. A candidate is better than another when its goodput is higher, or equal with a lower p99 latency. A
candidate the estimator drops is never measured; one measured twice (the same settings proposed by two stages) is
measured once.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

from vllm_repo.tune.space import BATCHING, Axes, Candidate


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a measured candidate scored: goodput (requests per second meeting the SLO) and p99 latency (ms)."""

    goodput_rps: float
    latency_ms: float


class SearchStopped(Exception):
    """Raised by ``measure`` to end the search: the time budget is spent, or the user pressed Ctrl-C."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def better(a: Outcome, b: Outcome) -> bool:
    if a.goodput_rps != b.goodput_rps:
        return a.goodput_rps > b.goodput_rps
    return a.latency_ms < b.latency_ms


def mean(outcomes: Sequence[Outcome]) -> Outcome:
    n = len(outcomes)
    return Outcome(sum(o.goodput_rps for o in outcomes) / n, sum(o.latency_ms for o in outcomes) / n)


def coarse(values: Sequence[int]) -> list[int]:
    """Every other value, and the last: the ends and the middle of the axis come first."""
    picked = list(values[::2])
    if values and values[-1] not in picked:
        picked.append(values[-1])
    return picked


@dataclasses.dataclass
class Search:
    axes: Axes
    size: Callable[[Candidate], str | None]  # why the estimator drops it, or None
    measure: Callable[[Candidate], Outcome | None]  # None: it failed to load or to answer
    confirmations: int = 0  # how many times run() may measure its best again before it takes it
    visited: list[Candidate] = dataclasses.field(default_factory=list)  # sized or measured, in order
    # A candidate's score: its measurement, or the mean of its measurements once it was measured again.
    outcomes: dict[tuple, Outcome | None] = dataclasses.field(default_factory=dict)
    repeats: dict[tuple, list[Outcome]] = dataclasses.field(default_factory=dict)  # every measurement, by key
    best: Candidate | None = None
    _best_outcome: Outcome | None = None

    def run(self) -> Candidate | None:
        """Search the axes; returns the best candidate measured (None when none was). SearchStopped ends it early,
        and is raised on, with ``best`` and ``outcomes`` as far as they got."""
        defaults = Candidate()
        self.visit(defaults)
        for key in BATCHING:
            self.axis(key, getattr(self.axes, key))
        for switch in self.axes.switches:
            base = self.best or defaults
            value = switch.value_for(base)
            if value is not None:
                self.visit(base.with_changes("switch", **{switch.key: value}))
        for tp, instances in self.axes.layouts:
            base = self.best or defaults
            self.visit(base.with_changes("layout", instances=instances, tensor_parallel_size=tp))
        self.confirm()
        return self.best

    def confirm(self) -> None:
        """Measure the best again (the stage "confirm" tells ``measure`` so), until the best has been measured more
        than once or the confirmations are spent; each candidate's score is the mean of its measurements."""
        for _ in range(self.confirmations):
            best = self.best
            if best is None or len(self.repeats.get(best.key(), ())) > 1:
                return
            first = self.repeats[best.key()][0]
            again = self.measure(best.with_changes("confirm"))
            # A repeat that failed (it did not load, or every request failed) scores nothing: settings that fail
            # half the time are not the ones to write.
            self.repeats[best.key()].append(again or Outcome(0.0, first.latency_ms))
            self.outcomes[best.key()] = mean(self.repeats[best.key()])
            self._rank()

    def _rank(self) -> None:
        """The best of the scores, in the order the candidates were visited (the first of equals stays)."""
        self.best, self._best_outcome = None, None
        for candidate in self.visited:
            outcome = self.outcomes.get(candidate.key())
            if outcome is not None and (self._best_outcome is None or better(outcome, self._best_outcome)):
                self.best, self._best_outcome = candidate, outcome

    def grid(self) -> Candidate | None:
        """Measure every candidate of the space instead: each pair of batching values (vLLM's default for either
        included) with every combination of the switches, on every layout. What a brute-force tuner measures, to
        check run() against: the same axes, so the same best can be found, with many more measurements."""
        self.visit(Candidate())
        for seqs in [None, *self.axes.max_num_seqs]:
            for tokens in [None, *self.axes.max_num_batched_tokens]:
                base = Candidate.of({"max_num_seqs": seqs, "max_num_batched_tokens": tokens}, stage="grid")
                for chosen in itertools.product((False, True), repeat=len(self.axes.switches)):
                    candidate: Candidate | None = base
                    for switch, on in zip(self.axes.switches, chosen, strict=True):
                        value = switch.value_for(candidate) if on and candidate is not None else None
                        if on and value is None:
                            candidate = None  # nothing to try that way: the combination without it stands for it
                        elif on and candidate is not None:
                            candidate = candidate.with_changes("grid", **{switch.key: value})
                    if candidate is None:
                        continue
                    self.visit(candidate)
                    for tp, instances in self.axes.layouts:
                        self.visit(candidate.with_changes("grid", instances=instances, tensor_parallel_size=tp))
        return self.best

    def visit(self, candidate: Candidate) -> Outcome | None:
        key = candidate.key()
        if key in self.outcomes:
            return self.outcomes[key]
        self.visited.append(candidate)
        if self.size(candidate) is not None:
            self.outcomes[key] = None
            return None
        outcome = self.measure(candidate)
        self.outcomes[key] = outcome
        if outcome is not None:
            self.repeats[key] = [outcome]
        if outcome is not None and (self._best_outcome is None or better(outcome, self._best_outcome)):
            self.best, self._best_outcome = candidate, outcome
        return outcome

    def axis(self, key: str, values: Sequence[int]) -> None:
        if not values:
            return
        base = self.best or Candidate()
        scored: dict[int, Outcome] = {}

        def try_value(value: int, stage: str) -> None:
            outcome = self.visit(base.with_changes(stage, **{key: value}))
            if outcome is not None:
                scored[value] = outcome

        for value in coarse(values):
            try_value(value, f"{key} coarse")
        if not scored:
            return
        top = max(scored, key=lambda v: (scored[v].goodput_rps, -scored[v].latency_ms))
        i = list(values).index(top)
        for j in (i - 1, i + 1):
            if 0 <= j < len(values) and values[j] not in coarse(values):
                try_value(values[j], f"{key} fine")


def pareto_front(points: Sequence[tuple[str, Outcome]]) -> list[str]:
    """The names of the points no other point beats on both goodput (higher) and latency (lower), by latency."""
    front = []
    for name, o in points:
        dominated = any(
            p.goodput_rps >= o.goodput_rps
            and p.latency_ms <= o.latency_ms
            and (p.goodput_rps > o.goodput_rps or p.latency_ms < o.latency_ms)
            for _, p in points
        )
        if not dominated:
            front.append((o.latency_ms, name))
    return [name for _, name in sorted(front)]
