#!/bin/bash
# python -m bench.backend_throughput on the nvidia-h200 device (bench/results/backend.md), in calls of the device tool made
# back to back while the machine stays warm. Here, once, with KIT the directory of the vLLM GPU bundle's scripts
# (build_bundle.sh, install.sh, make_model.py) and WORK any scratch directory:
#   "$KIT/build_bundle.sh" "$WORK" .gpuroute/chunks
#   rm .gpuroute/chunks/0? && split -b 48M -d -a 2 "$WORK/bundle.tar.xz" .gpuroute/chunks/   # tree + carry < 64 MiB
#   mkdir -p .gpuroute/remote && cp "$KIT"/*.sh "$KIT"/*.py .gpuroute/chunks/SHA256 .gpuroute/remote/
#   (cd "$VLLM_REPO_TRITON_HOME" && tar -cf - pytriton/tritonserver/{bin,backends,caches} \
#      pytriton/tritonserver/python_backend_stubs/3.12 nvidia_pytriton.libs | xz -9e) > .gpuroute/triton/triton.tar.xz
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#      --platform manylinux1_x86_64 -d .gpuroute/whl numpy==1.26.4 py-spy
#   for `tune` and `next` (P: the same --only-binary --python-version 3.12 --platform manylinux... options):
#   pip download $P -d .gpuroute/tc "tritonclient[grpc]==2.73.0"   (then remove numpy and what the device has:
#      aiohttp and its kin, attrs, packaging, typing_extensions, idna, certifi, urllib3; the gRPC client is all that
#      bench and vllm-repo use there; its HTTP extras only add to what a call carries)
#   pip download $P -d .gpuroute/vrdeps typer jsonschema aiohttp "protobuf>=6.33.5,<7"   (vllm-repo's own needs)
#   backend directories to compare with, in .gpuroute/variants/NAME/ (e.g. git archive REV vllm_repo/backend | tar -x)
# Then, on the device:
#   1. carry [.gpuroute/chunks/00, .gpuroute/remote]:                  bash bench/device_backend.sh part 00
#   2. carry [.gpuroute/chunks/01, .gpuroute/remote, .gpuroute/whl]:  bash bench/device_backend.sh unpack
#   3. carry [.gpuroute/remote, .gpuroute/triton, .gpuroute/variants]: bash bench/device_backend.sh run [bench args]
#      (BACKEND=DIR before it serves the bundled model with the backend in DIR instead of this tree's; HOPS=1 before it
#      times each request's hops for bench.native_hops (VLLM_REPO_TRACE_HOPS), in this tree's backend and in each
#      .gpuroute/variants/NAME/ directory whose code has the hook)
#      (the benchmark runs in the background; this call follows it for up to WAIT seconds, default 560)
#      or, for bench.pack_gpu, the same carry:                     bash bench/device_backend.sh pack [pack args]
#      or, for bench.tune_gpu, carry [.gpuroute/remote, .gpuroute/triton, .gpuroute/tc] (tritonclient's wheels):
#                                                                     bash bench/device_backend.sh tune [tune_gpu args]
#      then, while warm, carry [.gpuroute/remote, .gpuroute/tc, .gpuroute/vrdeps]:
#                                                                     bash bench/device_backend.sh next STEP ...
#      (a lease that starts with `next` carries .gpuroute/triton too, and tritonclient's wheels apart, first, where
#      the two with the tree pass the 64 MiB a call carries (they did: 67 MB): carry [.gpuroute/remote,
#      .gpuroute/tc]: bash bench/device_backend.sh clients; then `next` with [.gpuroute/remote, .gpuroute/vrdeps,
#      .gpuroute/triton])
#      (bench/gpu_proof.sh's steps: the faults, bench --compare; results beside the run's, all brought back each call)
#   4. carry [.gpuroute/remote]:                                       bash bench/device_backend.sh wait
#      (until it ends, up to WAIT seconds; then the results are under $OUT)
#   5. no carry: bash bench/device_backend.sh cachepack   (vLLM's compile cache back in pieces, for the next lease's
#      carry [.gpuroute/compile_cache]: bash bench/device_backend.sh cacheunpack, after unpack)
# The report's run: run --rounds 3 --concurrency 1,32,128,256,512 --requests 6,2,2,2,2 --prompt-words 128 ...
set -uo pipefail
stage=${1:?part NN | unpack | run | clients | next STEP | pack | tune | wait | cachepack | cacheunpack}; shift
RUN=/tmp/backend-bench
collect() {
  # What the benchmark wrote so far, and its log, come back under $OUT; once it has ended, HOPS=1's events as one xz
  # file, and their report. Those are read and packed once, at the end: a run to 1,024 streams writes about 80 MB of
  # events, which took 200 s to report and pack in one thread, past a call's 600 s where the run had taken 540.
  if [ "${1:-}" = ended ] && [ -d "$RUN"/out/hops ] && [ -f "$RUN"/tree/bench/native_hops.py ] &&
    [ ! -f "$RUN"/out/hops.tar.xz ]; then
    (cd "$RUN"/tree && "$PY" -m bench.native_hops report "$RUN"/out/hops --json "$RUN"/out/hops_report.json)
    tar -C "$RUN"/out -cf - hops | xz -T0 -3 > "$RUN"/out/hops.tar.xz
  fi
  # Everything in one archive (what comes back is at most 8 files, 2 folders down: a tune run writes more), and the
  # top-level files beside it, the first 6 by name.
  mkdir -p "${OUT:?}" &&
    tar -C "$RUN"/out -cf - --exclude=./hops --exclude=./prompts.jsonl . | xz -T0 -3 > "$OUT"/out.tar.xz
  find "$RUN"/out -maxdepth 1 -type f ! -name prompts.jsonl | sort | head -6 | xargs -r cp -t "$OUT"/
  cp "$RUN"/run.log "$OUT"/ 2>/dev/null
  tail -c 6000 "$RUN"/run.log | grep -v "^(EngineCore\|^INFO\|^WARNING\|^\[" | tail -40
}
install_tritonclient() {
  # tritonclient's wheels (.gpuroute/tc) into the device's Python, once a machine
  "$PY" -c "import tritonclient.grpc" 2>/dev/null ||
    "$PY" -m pip install -q --no-index --no-deps --no-compile .gpuroute/tc/*.whl
}
follow() {
  local deadline=$((SECONDS + ${WAIT:-560}))
  while [ -f "$RUN"/pid ] && kill -0 "$(cat "$RUN"/pid)" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
  if kill -0 "$(cat "$RUN"/pid)" 2>/dev/null; then echo "STILL RUNNING" && collect; else echo "FINISHED" && collect ended; fi
}
case $stage in
part)
  mkdir -p /tmp/vp && cp ".gpuroute/chunks/$1" /tmp/vp/ && sha256sum "/tmp/vp/$1" ;;
unpack)
  mkdir -p /tmp/vp && cp .gpuroute/chunks/01 /tmp/vp/ && source .gpuroute/remote/install.sh /tmp/vp /tmp/site || exit 1
  SP=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # numpy<2 for Triton 2.51's stub (string inputs); py-spy to profile the stub.
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .gpuroute/whl/*.whl || exit 1
  # scipy and scikit-learn on the device need numpy 2, and transformers imports them when they are there.
  for d in scipy sklearn; do [ -d "$SP/$d" ] && mv "$SP/$d" "$SP/$d.aside"; done
  # The stub ignores PYTHONPATH: vLLM's files reach it (and every Python here) through a .pth file, first on sys.path.
  echo "import sys; sys.path.insert(0, '/tmp/site')" > "$SP/zz_vllm_bundle.pth"
  # PRESET=qwen2.5-7b: its KV cache (57 KiB a token) lets three engines share one card at 1,024 streams
  [ -f /tmp/m/config.json ] || "$PY" .gpuroute/remote/make_model.py /tmp/m "${PRESET:-llama3-8b}" || exit 1
  "$PY" -c "import numpy, vllm; print('numpy', numpy.__version__, 'vllm', vllm.__version__)" ;;
run|pack|tune)
  source .gpuroute/remote/install.sh /tmp/vp /tmp/site || exit 1
  mkdir -p /tmp/triton && "$PY" -c "import tarfile,sys;tarfile.open(sys.argv[1]).extractall(sys.argv[2],filter='tar')" \
    .gpuroute/triton/triton.tar.xz /tmp/triton || exit 1
  rm -rf "$RUN" && mkdir -p "$RUN"/out && cp -r . "$RUN"/tree && cd "$RUN"/tree || exit 1
  if [ "$stage" = pack ]; then
    # bench.pack_gpu: plan --pack's three engines on GPU 0, and the same models started by hand (pack.md)
    export VLLM_REPO_TRITON_HOME=/tmp/triton PYTHONUNBUFFERED=1 PATH="$(dirname "$PY"):$PATH"
    # plan reads the bundled EngineArgs schemas, which an install maps in as vllm_repo._schemas; here from the tree
    ln -sfn ../schemas vllm_repo/_schemas
    setsid nohup "$PY" -m bench.pack_gpu --kit "$RUN"/tree/.gpuroute/remote --out "$RUN"/out "$@" \
      > "$RUN"/run.log 2>&1 &
    echo $! > "$RUN"/pid
    follow
    exit
  fi
  if [ "$stage" = tune ]; then
    # bench.tune_gpu: tune on the Llama-3-8B shape, the winner measured again, the full grid with --grid (tune.md)
    export VLLM_REPO_TRITON_HOME=/tmp/triton PYTHONUNBUFFERED=1 PATH="$(dirname "$PY"):$PATH"
    ln -sfn ../schemas vllm_repo/_schemas
    # bench's native client is tritonclient's gRPC one
    install_tritonclient || exit 1
    setsid nohup "$PY" -m bench.tune_gpu --model /tmp/m --out "$RUN"/out "$@" > "$RUN"/run.log 2>&1 &
    echo $! > "$RUN"/pid
    follow
    exit
  fi
  # `--clients http,grpc` after the bench args adds tritonclient's gRPC client: its wheels carried as .gpuroute/tc
  if [ -d .gpuroute/tc ]; then install_tritonclient || exit 1; fi
  # BACKEND=DIR: serve with that backend directory instead of this tree's (e.g. the code before a change, alone)
  [ -n "${BACKEND:-}" ] && { rm -rf vllm_repo/backend && cp -r "$BACKEND" vllm_repo/backend || exit 1; }
  # HOPS=1: the backend's hop hook on, for bench.native_hops (its report at the end, in collect)
  [ -n "${HOPS:-}" ] && export VLLM_REPO_TRACE_HOPS="$RUN"/out/hops
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  export VLLM_REPO_TRITON_HOME=/tmp/triton PYTHONUNBUFFERED=1 PATH="$(dirname "$PY"):$PATH"
  setsid nohup "$PY" -m bench.backend_throughput --device gpu --model /tmp/m --clients http --tokens 128 \
    --out "$RUN"/out "$@" > "$RUN"/run.log 2>&1 &
  echo $! > "$RUN"/pid
  follow ;;
next)
  # One more step of a series in the same lease (bench/gpu_proof.sh STEP): this call's tree replaces the run's, the
  # results under $RUN/out stay and come back together. carry [.gpuroute/remote, .gpuroute/tc, .gpuroute/vrdeps].
  source .gpuroute/remote/install.sh /tmp/vp /tmp/site || exit 1
  # Triton's files: the run stage's, or .gpuroute/triton carried with this call (a lease that starts with `next`)
  if [ ! -d /tmp/triton/pytriton ] && [ -f .gpuroute/triton/triton.tar.xz ]; then
    mkdir -p /tmp/triton && "$PY" -c "import tarfile,sys;tarfile.open(sys.argv[1]).extractall(sys.argv[2],filter='tar')" \
      .gpuroute/triton/triton.tar.xz /tmp/triton || exit 1
  fi
  [ -d /tmp/triton/pytriton ] || { echo "no Triton files here: the run stage first, or carry .gpuroute/triton"; exit 1; }
  SP=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # vllm-repo's own command: tritonclient's wheels into the device's Python (as for tune), the packages it lacks
  # (jsonschema and its kin) after site-packages, so none of the device's own is shadowed.
  install_tritonclient || exit 1  # each call: a no-op once its gRPC client imports
  if [ ! -f /tmp/vrdeps/.ok ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/vrdeps .gpuroute/vrdeps/*.whl || exit 1
    echo /tmp/vrdeps > "$SP/zzz_vrdeps.pth" && touch /tmp/vrdeps/.ok
  fi
  mkdir -p "$RUN"/out && rm -rf "$RUN"/tree && cp -r . "$RUN"/tree && cd "$RUN"/tree || exit 1
  # the data an install maps in as vllm_repo._schemas and vllm_repo._templates (init reads the templates)
  ln -sfn ../schemas vllm_repo/_schemas && ln -sfn ../templates vllm_repo/_templates
  export VLLM_REPO_TRITON_HOME=/tmp/triton PYTHONUNBUFFERED=1 PATH="$(dirname "$PY"):$PATH" RUN
  setsid nohup bash bench/gpu_proof.sh "$@" > "$RUN"/run.log 2>&1 &
  echo $! > "$RUN"/pid
  follow ;;
clients)
  # tritonclient's wheels (.gpuroute/tc) into the device's Python, in a call of their own (see `next` above)
  source .gpuroute/remote/install.sh /tmp/vp /tmp/site >/dev/null || exit 1
  install_tritonclient && "$PY" -c "import tritonclient.grpc; print('tritonclient.grpc ok')" ;;
wait)
  # the device's Python (PY), for the hops report once the run has ended
  source .gpuroute/remote/install.sh /tmp/vp /tmp/site >/dev/null || exit 1
  follow ;;
cachepack)
  # vLLM's torch.compile cache (a load with a new compile range or CUDA-graph sizes compiles for 20-40 s), in pieces
  # that come back (at most 8 files of 16 MiB); the next lease's cacheunpack puts it back, so its loads skip compiling.
  du -sh ~/.cache/vllm/torch_compile_cache || exit 1
  mkdir -p "${OUT:?}" && tar -C ~/.cache/vllm -cf - torch_compile_cache | xz -6 -T8 |
    split -b 15M -d -a 1 - "$OUT"/compile_cache.tar.xz.
  ls -la "$OUT"
  # more pieces than come back would be a cache cacheunpack cannot read: say so rather than lose the tail
  [ "$(ls "$OUT"/compile_cache.tar.xz.* | wc -l)" -le 8 ] || { echo "compile cache over 8 pieces: not brought back"; exit 1; } ;;
cacheunpack)
  # carry [.gpuroute/compile_cache] (cachepack's pieces)
  mkdir -p ~/.cache/vllm && cat .gpuroute/compile_cache/compile_cache.tar.xz.* | xz -dc | tar -C ~/.cache/vllm -xf - &&
    du -sh ~/.cache/vllm/torch_compile_cache ;;
esac
