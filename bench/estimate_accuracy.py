"""Accuracy of `vllm-repo estimate` against real vLLM start-ups from public logs.

Replays every entry of bench/data/vllm_memory_public_logs.json that has what a replay needs (see
bench/data/public_logs_settings.json) and prints predicted vs logged KV-cache tokens and available KV memory,
with the median and worst relative error. Target: median KV-token error <= 5% over the entries with complete data
(GPU size, utilization, max_model_len, logged KV tokens and the model config).

    python -m bench.estimate_accuracy [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from vllm_repo.estimate import estimate_model
from vllm_repo.repository.engine_settings import EngineSettings

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

TARGET_MEDIAN_TOKEN_ERROR = 0.05


def load() -> tuple[list[dict], dict[str, dict]]:
    entries = json.loads((DATA / "vllm_memory_public_logs.json").read_text(encoding="utf-8"))
    settings = json.loads((DATA / "public_logs_settings.json").read_text(encoding="utf-8"))["entries"]
    return entries, settings


def replay(entry: dict, how: dict) -> dict:
    gpu = how.get("gpu") or how["gpu_memory_gib"]
    settings = {
        k: how[k]
        for k in ("enforce_eager", "quantization", "dtype", "enable_expert_parallel", "max_num_batched_tokens")
        if k in how
    }
    if entry.get("kv_cache_dtype") not in (None, "auto"):
        settings["kv_cache_dtype"] = entry["kv_cache_dtype"]
    est = estimate_model(
        str(DATA / "models" / how["model"]),
        gpu,
        vllm_version=how["vllm_version"],
        offline=True,
        usage_context=how.get("usage_context", "engine"),
        settings=EngineSettings(
            tensor_parallel_size=entry.get("tp") or 1,
            gpu_memory_utilization=entry["gpu_memory_utilization"],
            max_model_len=entry["max_model_len"],
            **settings,
        ),
    )
    row = {
        "index": None,
        "model": entry.get("hf_repo") or how["model"],
        "gpu": est.gpu,
        "vllm": how["vllm_version"],
        "tp": est.tensor_parallel_size,
        "util": est.gpu_memory_utilization,
        "max_model_len": est.max_model_len,
        "logged_tokens": entry.get("kv_cache_tokens"),
        "predicted_tokens": est.kv_cache_tokens,
        "logged_kv_gib": entry.get("available_kv_cache_gib"),
        "predicted_kv_gib": round(est.kv_cache_gib, 2),
        "logged_weights_gib": entry.get("model_loading_gib"),
        "predicted_weights_gib": round(est.weights_gib, 2),
        "predicted_activation_gib": round(est.activation_gib, 2),
        "predicted_cudagraph_gib": est.cudagraph_gib,
    }
    row["token_error"] = _rel(row["predicted_tokens"], row["logged_tokens"])
    row["kv_gib_error"] = _rel(row["predicted_kv_gib"], row["logged_kv_gib"])
    row["complete"] = row["logged_tokens"] is not None and entry.get("max_model_len") is not None
    return row


def _rel(predicted, logged):
    if predicted is None or logged in (None, 0):
        return None
    return (predicted - logged) / abs(logged)


def evaluate() -> dict:
    entries, settings = load()
    rows = []
    for index, how in sorted(settings.items(), key=lambda kv: int(kv[0])):
        row = replay(entries[int(index)], how)
        row["index"] = int(index)
        rows.append(row)
    token_errors = [abs(r["token_error"]) for r in rows if r["complete"] and r["token_error"] is not None]
    kv_errors = [abs(r["kv_gib_error"]) for r in rows if r["kv_gib_error"] is not None]
    return {
        "rows": rows,
        "complete_entries": len(token_errors),
        "median_token_error": statistics.median(token_errors),
        "worst_token_error": max(token_errors),
        "median_kv_gib_error": statistics.median(kv_errors),
        "worst_kv_gib_error": max(kv_errors),
        "target_median_token_error": TARGET_MEDIAN_TOKEN_ERROR,
    }


def _pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = evaluate()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{'#':>3} {'model':<40} {'gpu':<14} {'vllm':<7} {'tp':>2} {'tokens logged':>13} {'predicted':>10} "
        f"{'err':>7} {'KV GiB':>7} {'pred':>7} {'err':>7}"
    )
    for r in result["rows"]:
        print(
            f"{r['index']:>3} {r['model'][:40]:<40} {r['gpu'][:14]:<14} {r['vllm']:<7} {r['tp']:>2} "
            f"{r['logged_tokens'] if r['logged_tokens'] is not None else '-':>13} {r['predicted_tokens']:>10} "
            f"{_pct(r['token_error']):>7} {r['logged_kv_gib'] if r['logged_kv_gib'] is not None else '-':>7} "
            f"{r['predicted_kv_gib']:>7} {_pct(r['kv_gib_error']):>7}"
        )
    print(
        f"\nKV tokens, {result['complete_entries']} entries with complete data: median error "
        f"{100 * result['median_token_error']:.1f}% (target <= {100 * TARGET_MEDIAN_TOKEN_ERROR:.0f}%), worst "
        f"{100 * result['worst_token_error']:.1f}%"
    )
    print(
        f"Available KV memory: median error {100 * result['median_kv_gib_error']:.1f}%, worst "
        f"{100 * result['worst_kv_gib_error']:.1f}%"
    )
    return 0 if result["median_token_error"] <= TARGET_MEDIAN_TOKEN_ERROR else 1


if __name__ == "__main__":
    sys.exit(main())
