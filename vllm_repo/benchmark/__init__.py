"""`vllm-repo bench`: latency and throughput of a served model under load, as a library.

- clients.py: one streamed request and its timings, over Triton's gRPC streaming (native) or the OpenAI API;
- prompts.py: synthetic prompts of an exact token length (the server's tokenizer), or a JSON Lines dataset;
- load.py: a load point driven at a fixed concurrency or a Poisson request rate;
- stats.py: the per-request records and the figures of a point (percentiles, throughput, goodput under an SLO);
- run.py: a whole benchmark (warm-up, every point), against a URL or a repository it launches and stops;
- report.py and plot.py: the table, the JSON report, the progress bar, and the latency-throughput plot;
- compare.py: `bench REPO --compare`, the same load through the repository's Triton and through vllm serve
  (vllm_serve.py: model.json as its command line, the server) or Triton with another backend directory, round after
  round; compare_report.py, compare_setup.py and compare_plot.py: its report, what it compared, and its plot.

Nothing here imports vLLM: the server's tokenizer is asked over the wire.
"""

from vllm_repo.benchmark.compare import CompareRun, CompareSpec, Contender, compare_repository
from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.run import BenchRun, BenchSpec, bench, bench_repository
from vllm_repo.benchmark.stats import RequestRecord, Slo, parse_slo, summarize

__all__ = [
    "BenchError",
    "BenchRun",
    "BenchSpec",
    "CompareRun",
    "CompareSpec",
    "Contender",
    "RequestRecord",
    "Slo",
    "bench",
    "bench_repository",
    "compare_repository",
    "parse_slo",
    "summarize",
]
