#!/bin/bash
# The OpenAI gateway against vllm serve on the nvidia-h200 device (bench/results/openai_gateway.md), in three calls
# of the device tool while the machine stays warm. Here, once, with KIT the directory of the vLLM GPU bundle's scripts
# (build_bundle.sh, install.sh, make_model.py) and WORK any scratch directory:
#   "$KIT/build_bundle.sh" "$WORK" .gpuroute/chunks
#   rm .gpuroute/chunks/0? && split -b 56M -d -a 2 "$WORK/bundle.tar.xz" .gpuroute/chunks/   # tree + chunk < 64 MiB
#   mkdir -p .gpuroute/remote && cp "$KIT"/*.sh "$KIT"/*.py .gpuroute/chunks/SHA256 .gpuroute/remote/
#   (cd "$VLLM_REPO_TRITON_HOME" && tar -cf - pytriton/tritonserver/{bin,backends,caches} \
#      pytriton/tritonserver/python_backend_stubs/3.12 nvidia_pytriton.libs | xz -6) > .gpuroute/triton/triton.tar.xz
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .gpuroute/whl \
#      numpy==1.26.4 'protobuf>=6.33.5,<7' grpcio==1.81.1 tritonclient==2.73.0 python-rapidjson
# Then, on the device:
#   1. carry [.gpuroute/chunks/00, .gpuroute/remote]:               bash bench/device_openai.sh part 00
#   2. carry [.gpuroute/chunks/01, .gpuroute/remote, .gpuroute/triton]: bash bench/device_openai.sh unpack
#   3. carry [.gpuroute/remote, .gpuroute/whl]:                       bash bench/device_openai.sh run [driver args]
# The report's runs: run --rounds 2 --warmup-rounds 1 --concurrency 1,32,128 --num-prompts 24,256,1024
#   --max-seconds 300 --engine-args '{"load_format":"dummy","max_model_len":4096,"gpu_memory_utilization":0.42,
#   "max_num_batched_tokens":8192,"max_num_seqs":1024}'   (about 450 s; --concurrency 128 --num-prompts 1024 alone
#   takes about 190 s, --concurrency 1,32 --num-prompts 24,256 about 230 s)
# One stream's time to first token hop by hop (bench.openai_hops), in stage 3: HOPS=/tmp/hops before it turns the
# gateway's and the backend's hop hook on (VLLM_REPO_TRACE_HOPS) and has Triton trace every request into that directory;
# run with --concurrency 1, then `"$PY" -m bench.openai_hops report /tmp/hops --skip N` there or on the copied files.
set -uo pipefail
stage=${1:?part NN | unpack | run}; shift
case $stage in
part)
  mkdir -p /tmp/vp && cp ".gpuroute/chunks/$1" /tmp/vp/ && sha256sum "/tmp/vp/$1" ;;
unpack)
  mkdir -p /tmp/vp && cp .gpuroute/chunks/01 /tmp/vp/ && source .gpuroute/remote/install.sh /tmp/vp /tmp/site || exit 1
  mkdir -p /tmp/triton && "$PY" -c "import tarfile,sys;tarfile.open(sys.argv[1]).extractall(sys.argv[2],filter='tar')" \
    .gpuroute/triton/triton.tar.xz /tmp/triton && ls /tmp/triton/pytriton/tritonserver/bin && touch /tmp/triton/.ok ;;
run)
  source .gpuroute/remote/install.sh /tmp/vp /tmp/site || exit 1
  [ -f /tmp/triton/.ok ] || { echo "no Triton files: run the unpack stage first"; exit 1; }
  SP=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ ! -f /tmp/.openai-env-ok ]; then
    # numpy<2 for Triton 2.51's stub (string inputs); grpcio, protobuf and tritonclient for the gateway's gRPC side.
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .gpuroute/whl/*.whl || exit 1
    # scipy and scikit-learn on the device need numpy 2, and transformers imports them when they are there.
    for d in scipy sklearn; do [ -d "$SP/$d" ] && mv "$SP/$d" "$SP/$d.aside"; done
    # The stub ignores PYTHONPATH: vLLM's files reach it (and every Python here) through a .pth file, first on sys.path.
    echo "import sys; sys.path.insert(0, '/tmp/site')" > "$SP/zz_vllm_bundle.pth"
    touch /tmp/.openai-env-ok
  fi
  "$PY" -c "import numpy, google.protobuf, grpc, tritonclient.grpc, aiohttp, vllm; print('numpy', numpy.__version__, \
'protobuf', google.protobuf.__version__, 'grpcio', grpc.__version__, 'aiohttp', aiohttp.__version__, 'vllm', vllm.__version__)" || exit 1
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  [ -f /tmp/m/config.json ] || "$PY" .gpuroute/remote/make_model.py /tmp/m llama3-8b || exit 1
  rm -f "$SP/zz_stub_switch.pth"  # an older experiment's; the backend now sets its own GIL switch interval
  export VLLM_REPO_TRITON_HOME=/tmp/triton PYTHONUNBUFFERED=1; mkdir -p "${OUT:=/tmp/openai-out}"
  hops=(); [ -n "${HOPS:-}" ] && { export VLLM_REPO_TRACE_HOPS="$HOPS"; hops=(--triton-trace "$HOPS"); }
  "$PY" -m bench.openai_gateway_device --model-dir /tmp/m --tokenizer /tmp/m/tok --out "${OUT:-/tmp/openai-out}" \
    --engine-args '{"load_format": "dummy", "max_model_len": 4096, "gpu_memory_utilization": 0.42}' "${hops[@]}" "$@" 2>&1 \
    | tee "${OUT:-/tmp/openai-out}/run.log" ;;
esac
