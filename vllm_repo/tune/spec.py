"""What a tune is asked to do: the model, the SLO, the load, and the candidates to try. The CLI's options take their
defaults from here (tests/tune/test_cli_defaults.py holds them to it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vllm_repo.benchmark.run import DEFAULT_OUTPUT_LEN
from vllm_repo.benchmark.stats import Slo
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.space import SWITCHES

DEFAULT_CONCURRENCY = 32


@dataclasses.dataclass
class TuneSpec:
    """What to tune and under which load. ``max_num_seqs`` / ``max_num_batched_tokens``: the values to try (None:
    derived from the load); ``switches``: which switches to try (None: all of SWITCHES)."""

    repository: Path
    slo: Slo
    model: str = ""
    concurrency: list[int] | None = None
    request_rates: list[float] | None = None
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int | None = None
    dataset: Path | None = None
    budget_minutes: float | None = None
    gpu: str | float | None = None
    num_gpus: int | None = None
    max_num_seqs: list[int] | None = None
    max_num_batched_tokens: list[int] | None = None
    switches: list[str] | None = None
    grid: bool = False  # measure every candidate of the space instead of searching it (Search.grid)
    # An earlier run's tune.json (True: the model's own), whose measured candidates are taken, not measured again.
    resume: Path | bool | None = None
    python: Path | None = None
    ready_timeout: float = 900.0
    seed: int = 0
    warmup: int = 1
    # How many times the search measures its best again before taking it (Search.confirm): 0 takes the best of
    # single measurements as it is.
    confirm: int = 1
    log_path: Path | None = None

    def check(self) -> None:
        if not self.slo:
            raise TuneError(
                "tune needs an SLO to score the candidates against", hint="e.g. --slo ttft_p99_ms=1000,itl_p99_ms=40"
            )
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise TuneError(f"--budget-minutes must be positive, not {self.budget_minutes:g}")
        for name, values in (
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
        ):
            if values is not None and any(v < 1 for v in values):
                raise TuneError(f"{name} values must be at least 1")
        unknown = sorted(set(self.switches or []) - set(SWITCHES))
        if unknown:
            raise TuneError(
                f"--switches: unknown switch {', '.join(unknown)}", hint=f"choose among {', '.join(SWITCHES)}"
            )

    @property
    def output_tokens(self) -> int:
        return self.output_len or DEFAULT_OUTPUT_LEN

    def loads(self) -> dict[str, list]:
        if self.request_rates:
            return {"request_rate": self.request_rates}
        return {"concurrency": self.concurrency or [DEFAULT_CONCURRENCY]}
