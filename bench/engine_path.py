"""The backend's engine path without Triton: its own request code driving AsyncLLM, checked and timed against raw
AsyncLLM on the same engine. Runs wherever vLLM runs (the GPU device, or the serving Python here).

    python -m bench.engine_path --model MODEL_DIR [--tokenizer TOK_DIR] [--engine-args JSON] [--rounds 3]
                                [--tokens 128] [--out OUT_DIR]

Checks, through TritonPythonModel.initialize/execute/finalize (bench/backend_harness.py stands in for Triton):
streaming deltas adding up, the final flag on the last data response, a non-streamed response, a bad sampling key
rejected by name with the model still serving, structured output, cancellation mid-stream (aborted in the engine).
Then tokens/s and time to first token at concurrency 1 and 32, alternating the backend path and raw AsyncLLM
(same engine instance, same event loop) round by round; medians are reported. Writes OUT_DIR/engine_path.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .backend_harness import Request, start_model
from .lib.rounds import field_medians, round_order

PROMPT = "The history of the printing press begins with"


def wait_all(requests: list[Request], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    for r in requests:
        if not r.sender.done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("a request did not finish")


def check(condition: bool, what: str, results: dict) -> None:
    results.setdefault("checks", {})[what] = bool(condition)
    print(("PASS " if condition else "FAIL ") + what, flush=True)


def functional_checks(model, results: dict, skip_structured: bool = False) -> None:
    # Streaming: deltas add up to max_tokens, FINAL rides on the last data response.
    r = Request(
        PROMPT,
        {"max_tokens": 64, "ignore_eos": True},
        stream=True,
        return_num_output_tokens=True,
        return_finish_reason=True,
    )
    model.execute([r])
    wait_all([r])
    flags = [f for _, _, f in r.sender.responses]
    check(r.sender.error() is None and r.sender.num_output_tokens() == 64, "stream: 64 tokens in deltas", results)
    check(
        flags[-1] == 1 and all(f == 0 for f in flags[:-1]) and "text_output" in r.sender.responses[-1][1].tensors,
        "stream: final flag on the last data response",
        results,
    )
    check(r.sender.responses[-1][1].tensors["finish_reason"][0] == b"length", "stream: finish_reason length", results)
    results["stream_responses_for_64_tokens"] = len(r.sender.responses)

    one = Request(PROMPT, {"max_tokens": 16, "ignore_eos": True}, return_num_output_tokens=True)
    model.execute([one])
    wait_all([one])
    check(
        len(one.sender.responses) == 1
        and one.sender.num_output_tokens() == 16
        and one.sender.texts()[0].startswith(PROMPT),
        "non-streamed: one response with the prompt",
        results,
    )

    bad = Request(PROMPT, {"temprature": 0.1})
    model.execute([bad])
    wait_all([bad])
    check('did you mean "temperature"' in (bad.sender.error() or ""), "bad key rejected with did-you-mean", results)

    if skip_structured:
        results["checks_skipped"] = ["structured output (the structured-output packages vLLM imports are absent)"]
        return _cancellation_checks(model, results)
    choice = Request(
        "Answer:", {"max_tokens": 8, "structured_outputs": {"choice": ["yes", "no"]}}, exclude_input_in_output=True
    )
    model.execute([choice])
    wait_all([choice])
    check(
        choice.sender.error() is None and choice.sender.texts() in (["yes"], ["no"]),
        "structured output choice",
        results,
    )

    _cancellation_checks(model, results)


def _cancellation_checks(model, results: dict) -> None:
    # Cancellation: the client cancels after a few deltas; the engine must drop the request promptly.
    c = Request(PROMPT, {"max_tokens": 1500, "ignore_eos": True}, stream=True, return_num_output_tokens=True)
    model.execute([c])
    while len(c.sender.responses) < 5:
        time.sleep(0.001)
    cancelled_at = time.perf_counter()
    c.sender.cancel()
    wait_all([c], timeout=30)
    final_at = c.sender.responses[-1][0]
    tokens_at_cancel = c.sender.num_output_tokens()
    time.sleep(0.5)
    engine = model.engine
    unfinished = (
        engine.get_num_unfinished_requests()
        if hasattr(engine, "get_num_unfinished_requests")
        else engine.output_processor.get_num_unfinished_requests()
    )
    check(
        "cancelled" in (c.sender.error() or "") and unfinished == 0,
        "cancellation: error response, nothing left running in the engine",
        results,
    )
    results["cancel_to_final_response_ms"] = round((final_at - cancelled_at) * 1000, 1)
    results["tokens_streamed_before_cancel"] = tokens_at_cancel

    after = Request(PROMPT, {"max_tokens": 4}, stream=True)
    model.execute([after])
    wait_all([after])
    check(after.sender.error() is None, "serves normally after the error and the cancellation", results)


async def raw_stream(engine, sampling_params_cls, kind, tokens: int) -> tuple[float, int]:
    """One request on raw AsyncLLM: (time to first output, tokens)."""
    params = sampling_params_cls(max_tokens=tokens, ignore_eos=True, output_kind=kind)
    start = time.perf_counter()
    first = None
    count = 0
    async for out in engine.generate({"prompt": PROMPT}, params, uuid.uuid4().hex):
        if first is None:
            first = time.perf_counter() - start
        count += len(out.outputs[0].token_ids)
    return first, count


def run_raw(model, concurrency: int, per_worker: int, tokens: int) -> dict:
    async def worker():
        stats = []
        for _ in range(per_worker):
            stats.append(await raw_stream(model.engine, model._SamplingParams, model._DELTA, tokens))
        return stats

    async def main():
        start = time.perf_counter()
        stats = [s for w in await asyncio.gather(*(worker() for _ in range(concurrency))) for s in w]
        return time.perf_counter() - start, stats

    wall, stats = asyncio.run_coroutine_threadsafe(main(), model._loop).result()
    return summarize(wall, [s[0] for s in stats], sum(s[1] for s in stats))


def run_backend(model, concurrency: int, per_worker: int, tokens: int) -> dict:
    """Like Triton's stub: one thread calls execute(); a finished request makes room for the next."""
    import queue

    finished: queue.SimpleQueue = queue.SimpleQueue()
    senders = []

    def submit() -> None:
        r = Request(
            PROMPT,
            {"max_tokens": tokens, "ignore_eos": True},
            stream=True,
            return_num_output_tokens=True,
            on_final=finished.put,
        )
        senders.append(r.sender)
        model.execute([r])

    start = time.perf_counter()
    total = concurrency * per_worker
    for _ in range(concurrency):
        submit()
    submitted, done = concurrency, 0
    while done < total:
        finished.get(timeout=600)
        done += 1
        if submitted < total:
            submit()
            submitted += 1
    wall = time.perf_counter() - start
    return summarize(wall, [s.ttft() for s in senders], sum(s.num_output_tokens() for s in senders))


def summarize(wall: float, ttfts: list[float], tokens: int) -> dict:
    return {
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_median_ms": round(statistics.median(ttfts) * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer")
    parser.add_argument("--engine-args", default="{}", help="extra engine arguments as JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--per-worker-c1", type=int, default=8)
    parser.add_argument("--per-worker-c32", type=int, default=2)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument(
        "--skip-structured",
        action="store_true",
        help="leave out the structured-output check (vLLM 0.26 imports every structured-output "
        "package to validate a request)",
    )
    args = parser.parse_args(argv)

    engine_args = {
        "model": args.model,
        **({"tokenizer": args.tokenizer} if args.tokenizer else {}),
        **json.loads(args.engine_args),
    }
    results: dict = {"engine_args": engine_args, "host": platform.node()}
    started = time.perf_counter()
    model = start_model(
        Path(tempfile.mkdtemp(prefix="engine-path-")), engine_args, parameters={"DEFAULT_MAX_TOKENS": "256"}
    )
    results["initialize_s"] = round(time.perf_counter() - started, 1)
    results["vllm_version"] = model.vllm_version
    try:
        import torch

        results["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:
        results["device"] = "unknown"
    try:
        functional_checks(model, results, args.skip_structured)
        # Warm both paths once, then alternate: the machine's noise hits both alike.
        run_raw(model, 4, 1, 16)
        run_backend(model, 4, 1, 16)
        rounds = {f"c{c}": {"raw": [], "backend": []} for c in (1, 32)}
        for i in range(args.rounds):
            for c, per in ((1, args.per_worker_c1), (32, args.per_worker_c32)):
                for name, fn in round_order((("raw", run_raw), ("backend", run_backend)), i):
                    result = fn(model, c, per, args.tokens)
                    rounds[f"c{c}"][name].append(result)
                    print(f"round {i} c={c} {name}: {result}", flush=True)
        results["rounds"] = rounds
        summary = {}
        for key, paths in rounds.items():
            med = {name: field_medians(runs, ("tokens_per_s", "ttft_median_ms")) for name, runs in paths.items()}
            med["backend_over_raw_throughput"] = round(med["backend"]["tokens_per_s"] / med["raw"]["tokens_per_s"], 3)
            med["added_ttft_ms"] = round(med["backend"]["ttft_median_ms"] - med["raw"]["ttft_median_ms"], 2)
            summary[key] = med
        results["summary"] = summary
        print(json.dumps(summary, indent=1), flush=True)
    finally:
        started = time.perf_counter()
        model.finalize()
        results["finalize_s"] = round(time.perf_counter() - started, 1)
        time.sleep(1)
        from vllm_repo.serve.processes import process_table

        children = [Path(f"/proc/{pid}") for pid, _, fields in process_table() if int(fields[1]) == os.getpid()]
        # multiprocessing's resource tracker lives until this process exits; anything else is a leak.
        results["child_processes_after_finalize"] = [
            (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120] for p in children
        ]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "engine_path.json").write_text(json.dumps(results, indent=1))
    return 0 if all(results.get("checks", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
