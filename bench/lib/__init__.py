"""What the benchmarks share: process CPU accounting (processes.py), alternating rounds and their ratios (rounds.py),
result files (results.py), the tiny model and its environment (tiny.py), the Triton server they measure through
(triton_bench.py) and vLLM's own OpenAI server as a reference (reference_server.py)."""
