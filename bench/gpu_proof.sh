#!/bin/bash
# The steps of the GPU proof run after python -m bench.backend_throughput (bench/results/backend.md), each started by
# `bash bench/device_backend.sh next STEP [SHAPE]` on the warm device: $PY is the device's Python with vLLM, $RUN the
# run's directory (results under $RUN/out/STEP), the model at /tmp/m with dummy weights (the shape `unpack` made:
# Llama-3-8B, or PRESET's).
#   faults [PARAMETERS]  python -m bench.backend_faults: 256 streams, a quarter closed mid-stream; the engine killed under load
#   compare [SHAPE]      vllm-repo bench REPO --compare vllm-serve at 1, 32, 128, 256 and 512 streams, ROUNDS rounds
#                        (default 2), on a repository that `vllm-repo init` writes (metrics on), native and OpenAI
#                        endpoints (CONCURRENCY and NUM_PROMPTS choose other points, e.g. 128,256,512 and
#                        512,1024,2048 where the lease's time is short)
#   off                  python -m bench.backend_throughput with --metrics off at 1, 128, 256 and 1,024 streams: the
#                        labelled variant (UTIL=0.27 on an 80 GB card: three engines share it)
set -uo pipefail
step=${1:?faults | compare | off}; shift
out="$RUN/out/$step" && mkdir -p "$out"
# Sized for one card: a single engine at a time in these steps (the run's three shared it at 0.29 each).
engine='{"load_format": "dummy", "tokenizer": "/tmp/m/tok", "max_num_batched_tokens": 8192, "max_num_seqs": 1024'
echo "== $step $(date +%T)"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
case $step in
faults)
  "$PY" -m bench.backend_faults --device gpu --model /tmp/m --engine-args "$engine, \"gpu_memory_utilization\": 0.5}" \
    --streams 256 --tokens 512 --parameters "${1:-"{}"}" --out "$out" ;;
compare)
  # The repository as `vllm-repo init` writes it (REPORT_CUSTOM_METRICS on, "disable_log_stats": false), with the
  # shape the run chose ("process": ENGINE_PROCESS "true"); the tokenizer gets the chat template both servers read.
  rm -rf /tmp/repo && "$PY" -m vllm_repo init /tmp/repo --model /tmp/m --name llm --set load_format=dummy \
    --set tokenizer=/tmp/m/tok --set max_num_seqs=1024 --set max_num_batched_tokens=8192 --set max_model_len=4096 \
    --set gpu_memory_utilization=0.45 || exit 1
  if [ "${1:-}" = process ]; then
    printf 'parameters {\n  key: "ENGINE_PROCESS"\n  value: { string_value: "true" }\n}\n' >> /tmp/repo/llm/config.pbtxt
  fi
  "$PY" -c "from pathlib import Path; from bench.openai_gateway_device import add_chat_template
add_chat_template(Path('/tmp/m/tok'))" || exit 1
  cp -r /tmp/repo "$out"/repository
  "$PY" -m vllm_repo bench /tmp/repo --model llm --compare vllm-serve --together \
    --endpoint native --endpoint openai-chat --concurrency "${CONCURRENCY:-1,32,128,256,512}" \
    --num-prompts "${NUM_PROMPTS:-12,128,512,1024,2048}" \
    --input-len 128 --output-len 128 --rounds "${ROUNDS:-2}" --python "$PY" --ready-timeout 900 \
    --format json --output "$out"/compare.json --plot "$out"/compare.html
  "$PY" -c "import json
from vllm_repo.benchmark.compare_report import to_text
print(to_text(json.load(open('$out/compare.json'))))" > "$out"/compare.txt ;;
off)
  "$PY" -m bench.backend_throughput --device gpu --model /tmp/m --clients http --tokens 128 --metrics off \
    --engine-args "$engine, \"gpu_memory_utilization\": ${UTIL:-0.29}}" --parameters '{"ENGINE_PROCESS": "false"}' \
    --variants '{"process": {"ENGINE_PROCESS": "true"}}' --concurrency 1,128,256,1024 --requests 12,2,2,2 \
    --prompt-words 128 \
    --rounds 2 --out "$out" ;;
esac
echo "== $step done rc=$? $(date +%T)"
