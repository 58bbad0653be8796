"""Fit the activation and CUDA-graph constants of vllm_repo/estimate/activation.py from the real vLLM runs in
bench/data/h200_calibration.json, and show how the model reproduces each run.

    python -m bench.calibrate

Activation (eager Model Runner V2 runs): least squares of
    peak = C0 + tokens * (A * hidden + B * intermediate)   in bytes (bf16).
CUDA graphs: mean MiB per (captured graph x decoder layer) after the largest batch's activations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

GiB = 1 << 30


def load() -> dict:
    return json.loads((HERE / "data" / "h200_calibration.json").read_text(encoding="utf-8"))


def _solve(rows: list[list[float]], values: list[float]) -> list[float]:
    n = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    v = [sum(r[i] * y for r, y in zip(rows, values, strict=True)) for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            f = m[j][i] / m[i][i]
            m[j] = [a - f * b for a, b in zip(m[j], m[i], strict=True)]
            v[j] -= f * v[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (v[i] - sum(m[i][k] * x[k] for k in range(i + 1, n))) / m[i][i]
    return x


def fit_activation(doc: dict) -> tuple[float, float, float]:
    rows, values = [], []
    for run in doc["runs"]:
        if run["engine_kwargs"].get("enforce_eager") and run["model_runner"] == "v2":
            cfg = doc["model_configs"][run["preset"]]
            tokens = run["max_num_batched_tokens"]
            rows.append([1.0, tokens * cfg["hidden_size"] / GiB, tokens * cfg["intermediate_size"] / GiB])
            values.append(run["activation_gib"])
    c0, a, b = _solve(rows, values)
    return c0, a, b


def fit_sampler(doc: dict) -> float:
    """Bytes per logit of the sampler's profile run on Model Runner V1 (PyTorch top-k/top-p), where it sets the
    peak: what is left after the base and the forward's hidden states, over rows x vocabulary."""
    c0, _, _ = fit_activation(doc)
    per = []
    for run in doc["runs"]:
        if run["model_runner"] == "v1" and run["engine_kwargs"].get("enforce_eager"):
            cfg = doc["model_configs"][run["preset"]]
            tokens = run["max_num_batched_tokens"]
            rows = min(run["max_num_seqs"], tokens)
            rest = (run["activation_gib"] - c0) * GiB - tokens * cfg["hidden_size"] * 2
            per.append(rest / (rows * cfg["vocab_size"]))
    return sum(per) / len(per)


def fit_cudagraph(doc: dict) -> float:
    from vllm_repo.estimate.activation import capture_sizes, forward_peak_bytes
    from vllm_repo.estimate.architecture import from_config

    per = []
    for run in doc["runs"]:
        if run.get("graph_capture_gib"):
            arch = from_config(doc["model_configs"][run["preset"]])
            sizes = capture_sizes(run["max_num_seqs"])
            graphs = len(sizes) + len([s for s in sizes if s <= run["max_num_seqs"]])
            rest = run["graph_capture_gib"] * GiB - forward_peak_bytes(arch, max(sizes), 1, 2)
            per.append(rest / (graphs * arch.num_layers) / (1 << 20))
    return sum(per) / len(per)


def main() -> int:
    doc = load()
    c0, a, b = fit_activation(doc)
    print(f"activation: C0 = {c0:.4f} GiB, A = {a:.2f} bytes/hidden, B = {b:.2f} bytes/intermediate (per token)")
    print(f"sampler (Model Runner V1): {fit_sampler(doc):.1f} bytes per logit")
    print(f"CUDA graphs: {fit_cudagraph(doc):.3f} MiB per graph per layer")
    from vllm_repo.estimate import estimate_model
    from vllm_repo.estimate.architecture import from_config
    from vllm_repo.estimate.model_facts import ModelFacts
    from vllm_repo.repository.engine_settings import read_engine_settings

    print(f"\n{'run':<24} {'act GiB':>8} {'pred':>6} {'KV GiB':>8} {'pred':>8} {'tokens':>9} {'pred':>9}")
    for run in doc["runs"]:
        cfg = doc["model_configs"][run["preset"]]
        facts = ModelFacts(run["preset"], cfg, "calibration", None, from_config(cfg))
        est = estimate_model(
            run["preset"],
            "H200",
            vllm_version=doc["vllm_version"],
            facts=facts,
            usage_context=run["usage_context"],
            model_runner_v2=run["model_runner"] == "v2",
            settings=read_engine_settings(run["engine_kwargs"], strict=True),
        )
        print(
            f"{run['name']:<24} {run['activation_gib']:>8.2f} {est.activation_gib:>6.2f} "
            f"{run['available_kv_gib']:>8.2f} {est.kv_cache_gib:>8.2f} {run['kv_cache_tokens']:>9} "
            f"{est.kv_cache_tokens:>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
