"""`vllm-repo tune`: the engine settings that serve a model best under the user's latency targets, measured through
Triton on a copy of the user's own repository, and written back when asked.

- space.py: the candidates (batching settings, switches, layouts) and the estimator's verdict on each;
- search.py: the order candidates are measured in (coarse to fine, one axis at a time) and the Pareto front;
- server.py: the work copy and the Triton server in explicit model-control mode that reloads each candidate;
- run.py: a whole tune, measured with bench's own code (vllm_repo.benchmark);
- evidence.py: tune.json, the evidence kept beside the model (validate reads it, so importing this package imports
  nothing else until tune itself is asked for);
- write.py: --write, the winner into model.json (and config.pbtxt), atomically, with the diff;
- report.py: the table, the JSON, and the plot of goodput against p99 latency.

Nothing here imports vLLM.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TuneError", "TuneResult", "TuneSpec", "tune"]


def __getattr__(name: str) -> Any:
    if name == "TuneError":
        from vllm_repo.tune.errors import TuneError

        return TuneError
    if name in ("TuneResult", "TuneSpec", "tune"):
        from vllm_repo.tune import run

        return getattr(run, name)
    raise AttributeError(name)
