"""`vllm-repo tune`: the engine settings that serve a model best under the user's latency targets, measured through
Triton on a copy of the user's own repository, and written back when asked.

- spec.py: what a tune is asked to do (TuneSpec), and the defaults the CLI's options take;
- space.py: the candidates (batching settings, switches, layouts) and the estimator's verdict on each;
- sizing.py: the GPU to size for, the load in requests and tokens, the estimator asked about each candidate (Sizer),
  and the values and switches the search tries;
- candidates.py: the model to tune and each candidate's model.json and config.pbtxt;
- search.py: the order candidates are measured in (coarse to fine, one axis at a time) and the Pareto front;
- server.py: the work copy and the Triton server in explicit model-control mode that reloads each candidate;
- run.py: a whole tune (TuneRun), measured with bench's own code (vllm_repo.benchmark);
- evidence.py: tune.json, the evidence kept beside the model, typed (TuneEvidence, CandidateRecord);
- write.py: --write, the winner into model.json (and config.pbtxt), atomically, with the diff;
- report.py: the table, the JSON, and the plot of goodput against p99 latency.

Nothing here imports vLLM.
"""

from __future__ import annotations

from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.run import TuneResult, TuneRun, tune
from vllm_repo.tune.spec import TuneSpec

__all__ = ["TuneError", "TuneResult", "TuneRun", "TuneSpec", "tune"]
