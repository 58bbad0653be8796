"""A whole tune: size the candidate space, start one server on a copy of the model, measure candidates in the
search's order by reloading the model through Triton's model-control API, stop the server, and make the evidence.

``tune(spec)`` returns a TuneResult: the evidence (tune.json's content), the winner, and the files ``--write`` changes
(write.py makes and writes them). Ctrl-C and the time budget end the search between (or during) candidates: the
server's process group is stopped, and the evidence holds what was measured. A run resumed from that evidence
(``spec.resume``) takes its measured candidates as they are and measures only the others.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_repo.benchmark import BenchError, BenchSpec, Slo, bench
from vllm_repo.benchmark.run import DEFAULT_OUTPUT_LEN, Progress
from vllm_repo.repository import ModelDirectory, VersionDirectory, open_repository
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.tune import evidence as ev
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.search import Outcome, Search, SearchStopped, pareto_front
from vllm_repo.tune.space import (
    BATCHING,
    CHUNKED_PREFILL,
    GRAPH_KEYS,
    PREFIX_CACHING,
    SWITCHES,
    Axes,
    Candidate,
    Sizing,
    Switch,
    capture_size,
    default_seqs,
    default_tokens,
    graph_switch,
    judge,
    layouts,
)

DEFAULT_CONCURRENCY = 32
# A large nominal GPU for sizing the CPU's KV cache: only kv_cache_memory_bytes bounds it there.
CPU_NOMINAL_GPU_GIB = 4096.0


@dataclasses.dataclass
class TuneSpec:
    """What to tune and under which load. ``max_num_seqs`` / ``max_num_batched_tokens``: the values to try (None:
    derived from the load); ``switches``: which switches to try (None: all of SWITCHES)."""

    repository: Path
    slo: Slo
    model: str = ""
    concurrency: list[int] | None = None
    request_rates: list[float] | None = None
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int | None = None
    dataset: Path | None = None
    budget_minutes: float | None = None
    gpu: str | float | None = None
    num_gpus: int | None = None
    max_num_seqs: list[int] | None = None
    max_num_batched_tokens: list[int] | None = None
    switches: list[str] | None = None
    grid: bool = False  # measure every candidate of the space instead of searching it (Search.grid)
    # An earlier run's tune.json (True: the model's own), whose measured candidates are taken, not measured again.
    resume: Path | bool | None = None
    python: Path | None = None
    ready_timeout: float = 900.0
    seed: int = 0
    warmup: int = 1
    # How many times the search measures its best again before taking it (Search.confirm): 0 takes the best of
    # single measurements as it is.
    confirm: int = 1
    log_path: Path | None = None

    def check(self) -> None:
        if not self.slo:
            raise TuneError(
                "tune needs an SLO to score the candidates against", hint="e.g. --slo ttft_p99_ms=1000,itl_p99_ms=40"
            )
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise TuneError(f"--budget-minutes must be positive, not {self.budget_minutes:g}")
        for name, values in (
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
        ):
            if values is not None and any(v < 1 for v in values):
                raise TuneError(f"{name} values must be at least 1")
        unknown = sorted(set(self.switches or []) - set(SWITCHES))
        if unknown:
            raise TuneError(
                f"--switches: unknown switch {', '.join(unknown)}", hint=f"choose among {', '.join(SWITCHES)}"
            )

    @property
    def output_tokens(self) -> int:
        return self.output_len or DEFAULT_OUTPUT_LEN

    def loads(self) -> dict[str, list]:
        if self.request_rates:
            return {"request_rate": self.request_rates}
        return {"concurrency": self.concurrency or [DEFAULT_CONCURRENCY]}


@dataclasses.dataclass
class TuneResult:
    evidence: dict[str, Any]
    model: ModelDirectory
    version: VersionDirectory
    winner: Candidate | None
    original_args: dict[str, Any]
    interrupted: bool = False


# ---------------------------------------------------------------------------------------------------------------------
# The model and the load
# ---------------------------------------------------------------------------------------------------------------------


def find_model(repository: Path, name: str) -> tuple[ModelDirectory, VersionDirectory, dict[str, Any]]:
    """The model to tune, the version directory Triton serves (the latest), and its model.json's object."""
    if not repository.is_dir():
        raise TuneError(f"{repository}: no such directory")
    models = [m for m in open_repository(repository).models if m.uses_vllm_backend]
    if not name:
        if len(models) != 1:
            raise TuneError(
                f"{repository} has {len(models)} vLLM models: name the one to tune with --model",
                hint=f"its models: {', '.join(m.name for m in models) or 'none'}",
            )
        model = models[0]
    else:
        found = [m for m in models if m.name == name]
        if not found:
            raise TuneError(
                f"{repository} has no vLLM model '{name}'", hint=f"its models: {', '.join(m.name for m in models)}"
            )
        model = found[0]
    served = [v for v in model.versions if v.engine_args is not None]
    if not served:
        raise TuneError(f"{model.path} has no version directory with a model.json")
    version = served[-1]
    doc = version.engine_args
    assert doc is not None
    if not doc.ok or not isinstance(doc.data, dict):
        raise TuneError(f"{doc.path} is not a JSON object", hint=f"`vllm-repo validate {model.path}` says why")
    return model, version, dict(doc.data)


def load_concurrency(spec: TuneSpec) -> int | None:
    """How many requests the load keeps in flight: the largest --concurrency; for request rates, by Little's law,
    the rate times the longest a request may take and still meet the SLO (None where the SLO does not bound it)."""
    if not spec.request_rates:
        return max(spec.concurrency or [DEFAULT_CONCURRENCY])
    slo = spec.slo
    if slo.e2e_p99_ms is not None:
        longest_ms = slo.e2e_p99_ms
    elif slo.ttft_p99_ms is not None and slo.itl_p99_ms is not None:
        longest_ms = slo.ttft_p99_ms + slo.itl_p99_ms * max(spec.output_tokens - 1, 0)
    else:
        return None
    return max(1, math.ceil(max(spec.request_rates) * longest_ms / 1000))


def tokens_per_request(spec: TuneSpec) -> tuple[int, bool]:
    """Tokens of KV cache one request takes at its end (prompt and output), and whether that is approximate (a
    dataset's prompts are counted at about four bytes a token)."""
    if spec.dataset is None:
        return spec.input_len + spec.output_tokens, False
    from vllm_repo.benchmark.prompts import load_dataset

    prompts = load_dataset(spec.dataset, spec.output_len)
    mean = sum(math.ceil(len(p.text.encode()) / 4) + p.output_len for p in prompts) / max(len(prompts), 1)
    return math.ceil(mean), True


def detect_gpus() -> tuple[float, int] | None:
    """(memory of the first NVIDIA GPU in GiB, how many there are) from nvidia-smi; None without it."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sizes = [float(line) for line in done.stdout.split() if line.strip().replace(".", "", 1).isdigit()]
    if done.returncode != 0 or not sizes:
        return None
    return sizes[0] / 1024, len(sizes)


# ---------------------------------------------------------------------------------------------------------------------
# Sizing
# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Sizer:
    """Sizes candidates with the estimator; remembers each verdict."""

    original: dict[str, Any]
    version_dir: Path
    vllm_version: str | None
    gpu: Any  # a Gpu, or None for the CPU's KV cache
    cpu_kv_bytes: int | None
    concurrency: int | None
    tokens_per_request: int
    facts: Any = None
    verdicts: dict[tuple, Sizing] = dataclasses.field(default_factory=dict)

    @property
    def where(self) -> str:
        if self.gpu is None:
            return f"in the CPU's KV cache ({(self.cpu_kv_bytes or 0) / 2**30:g} GiB)"
        return f"on {self.gpu.name}"

    def size(self, candidate: Candidate) -> Sizing:
        key = candidate.key()
        if key not in self.verdicts:
            self.verdicts[key] = self._size(candidate)
        return self.verdicts[key]

    def _size(self, candidate: Candidate) -> Sizing:
        from vllm_repo.estimate import EstimateError, estimate_model, load_model_facts
        from vllm_repo.estimate.gpus import custom_gpu

        args = candidate_args(self.original, candidate)
        settings = read_engine_settings(args)
        refused = refused_by_vllm(settings, args)
        if refused:
            return Sizing(refused)
        model = settings.model or ""
        if self.facts is None:
            try:
                self.facts = load_model_facts(model, offline=True, revision=settings.revision, base=self.version_dir)
            except Exception as exc:
                raise TuneError(
                    f"cannot size {model}: {exc}",
                    hint="tune reads the model's config.json offline: a local model directory or the Hugging Face "
                    "cache",
                ) from None
        gpu = self.gpu
        if gpu is None:
            gpu = custom_gpu(CPU_NOMINAL_GPU_GIB)
            if settings.kv_cache_memory_bytes is None:
                settings = settings.replace(kv_cache_memory_bytes=self.cpu_kv_bytes)
        try:
            est = estimate_model(
                model,
                gpu,
                num_gpus=settings.parallel_size,
                vllm_version=self.vllm_version,
                facts=self.facts,
                settings=settings,
            )
        except EstimateError as exc:
            return Sizing(f"vLLM would refuse these settings: {exc.message}")
        concurrency = self.concurrency if self.concurrency is not None else est.max_num_seqs
        per_engine = math.ceil(concurrency / max(candidate.instances, 1))
        return judge(
            # Without a GPU only the KV cache is sized: fits is whether it holds one request at max_model_len.
            fits=est.fits if self.gpu is not None else (None if est.fits else False),
            error=est.error,
            kv_cache_tokens=est.kv_cache_tokens,
            max_num_seqs=est.max_num_seqs,
            max_num_batched_tokens=est.max_num_batched_tokens,
            block_size=est.block_size,
            concurrency=per_engine,
            tokens_per_request=self.tokens_per_request,
            where=self.where,
        )


def refused_by_vllm(settings: Any, args: dict[str, Any]) -> str | None:
    """Combinations vLLM's scheduler refuses outright, whatever the memory."""
    seqs, tokens = settings.max_num_seqs, settings.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        return f"vLLM refuses max_num_batched_tokens ({tokens}) smaller than max_num_seqs ({seqs})"
    chunked_off = args.get(CHUNKED_PREFILL) is False
    if chunked_off and tokens is not None and settings.max_model_len is not None and tokens < settings.max_model_len:
        return (
            f"vLLM refuses max_num_batched_tokens ({tokens}) smaller than max_model_len ({settings.max_model_len}) "
            "without chunked prefill"
        )
    return None


def candidate_args(original: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    """The candidate's model.json: the original without its batching settings, then the candidate's changes (keys
    the original has stay where they were)."""
    changes = {**dict.fromkeys(BATCHING), **candidate.settings}
    args = {k: changes.get(k, v) for k, v in original.items()}
    args.update({k: v for k, v in changes.items() if k not in args})
    return {k: v for k, v in args.items() if v is not None or (k in original and k not in changes)}


# ---------------------------------------------------------------------------------------------------------------------
# The search space
# ---------------------------------------------------------------------------------------------------------------------


def make_axes(
    spec: TuneSpec, original: dict[str, Any], sizer: Sizer, schema_keys: set[str], release: Any, num_gpus: int
) -> tuple[Axes, list[str]]:
    """The values and switches to try, and notes on those left out."""
    notes: list[str] = []
    settings = read_engine_settings(original)
    concurrency = sizer.concurrency or 256
    seqs = sorted(set(spec.max_num_seqs or default_seqs(concurrency)))
    tokens = sorted(set(spec.max_num_batched_tokens or default_tokens(seqs)))
    wanted = SWITCHES if spec.switches is None else tuple(spec.switches)
    switches: list[Switch] = []
    for name in wanted:
        if name in (PREFIX_CACHING, CHUNKED_PREFILL):
            value = original.get(name)
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true"  # quoted, as Triton's own backend's files often are
            if not isinstance(value, bool):
                value = default_switch(name, release, settings.max_model_len or 0)
            switches.append(Switch(name, functools.partial(_constant, not value)))
        else:
            key, why = graph_switch(
                schema_keys,
                bool(settings.enforce_eager),
                next((original[k] for k in GRAPH_KEYS if k in original), None),
            )
            if key is None:
                notes.append(f"CUDA-graph capture size not tried: {why}")
                continue

            def graph_value(best: Candidate, key: str = key) -> Any:
                seqs_now = best.settings.get("max_num_seqs") or sizer.size(best).max_num_seqs or 256
                size = capture_size(seqs_now)
                return [size] if key == "cuda_graph_sizes" else size

            switches.append(Switch(key, graph_value))
    heads = sizer.facts.arch.num_heads if sizer.facts is not None else 1
    return Axes(seqs, tokens, switches, layouts(num_gpus, settings.tp, heads)), notes


def _constant(value: Any, best: Candidate) -> Any:
    return value


def default_switch(name: str, release: Any, max_model_len: int) -> bool:
    """The switch as vLLM sets it when model.json leaves it out."""
    if name == CHUNKED_PREFILL:
        return bool(release.chunked_prefill(max_model_len, None))
    return not release.v0_engine  # prefix caching: on by default from the V1 engine


def config_for(model: ModelDirectory, candidate: Candidate, original_instances: int) -> str | None:
    """config.pbtxt for a candidate whose instances differ from the model's: one engine of tensor_parallel_size GPUs
    per instance, each on GPUs of its own."""
    if candidate.instances == original_instances or model.config is None or model.config.text is None:
        return None
    from vllm_repo.scaffold.plan import placement_config

    tp = int(candidate.settings.get("tensor_parallel_size") or 1)
    groups = [tuple(range(i * tp, (i + 1) * tp)) for i in range(candidate.instances)]
    return placement_config(model.config.text, groups, f": {candidate.instances} engine(s), chosen by vllm-repo tune.")


def instance_count(model: ModelDirectory) -> int:
    doc = model.config
    if doc is None or doc.config is None or not doc.config.instance_group:
        return 1
    return sum(max(group.count, 1) for group in doc.config.instance_group)


# ---------------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------------


def tune(spec: TuneSpec, *, say: Callable[[str], None] | None = None, progress: Progress | None = None) -> TuneResult:
    """Tune ``spec.model`` of ``spec.repository`` (see the module's docstring). ``say`` gets a line per step."""
    from vllm_repo.serve.launch_plan import has_nvidia_gpu, prepare_launch
    from vllm_repo.serve.ports import free_ports
    from vllm_repo.settings import resolve_settings
    from vllm_repo.tune.server import ModelServer, temporary_directory, work_copy, write_candidate_files

    def note(message: str) -> None:
        if say:
            say(message)

    started_at = time.monotonic()
    deadline = started_at + spec.budget_minutes * 60 if spec.budget_minutes else None
    spec.check()
    model, version, original = find_model(spec.repository, spec.model)
    project = resolve_settings(spec.repository, gpu=spec.gpu, num_gpus=spec.num_gpus)
    scratch = temporary_directory()
    server: ModelServer | None = None
    started = 0  # Triton servers started: each ModelServer, and those it started anew
    try:
        root = work_copy(model.path, scratch)
        work_model = root / model.name
        host = "127.0.0.1"
        http_port, grpc_port, metrics_port = free_ports(3, host)
        plan = prepare_launch(
            root, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, python=spec.python
        )
        vllm_version = plan.python.vllm_version
        notes = list(plan.notes)
        gpu, num_gpus, where_notes = _gpu(project, has_nvidia_gpu())
        notes += where_notes
        cpu_kv = None
        if gpu is None:
            space = plan.env.get("VLLM_CPU_KVCACHE_SPACE") or os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "4"
            cpu_kv = int(float(space) * 2**30)
        per_request, approximate = tokens_per_request(spec)
        sizer = Sizer(original, version.path, vllm_version, gpu, cpu_kv, load_concurrency(spec), per_request)
        from vllm_repo.releases.memory_budget import resolve_release
        from vllm_repo.schema.loader import schema_for_release

        release, _ = resolve_release(vllm_version)
        schema = schema_for_release(release.version.base_version)
        sizer.size(Candidate())  # reads the model's facts, or says why it cannot
        axes, axis_notes = make_axes(spec, original, sizer, set(schema.fields) if schema else set(), release, num_gpus)
        notes += axis_notes
        if approximate:
            notes.append("the dataset's prompts are counted at about four bytes a token for the KV-cache check")
        run_keys = _run_keys(spec, model, version, original, vllm_version, sizer)
        resume = model.path / ev.TUNE_FILE if spec.resume is True else spec.resume or None
        earlier = resumed_candidates(resume, run_keys) if resume is not None else {}
        if resume is not None:
            notes.append(f"resumed from {resume}: its {len(earlier)} measured candidate(s) are not measured again")
        records: dict[tuple, dict[str, Any]] = {}

        def record(candidate: Candidate, status: str, **extra: Any) -> dict[str, Any]:
            sizing = sizer.size(candidate)
            entry = ev.candidate_record(
                candidate.name, candidate.stage, candidate.settings, candidate.instances, status,
                reason=sizing.dropped, sizing=sizing.to_json(),
            )  # fmt: skip
            entry.update(extra)
            records[candidate.key()] = entry
            return entry

        # The batching grid is sized before anything starts; what it drops is on record whether or not the search
        # would have come to it.
        for seqs in [None, *axes.max_num_seqs]:
            for tokens in [None, *axes.max_num_batched_tokens]:
                stage = "defaults" if seqs is None and tokens is None else "batching grid"
                candidate = Candidate.of({"max_num_seqs": seqs, "max_num_batched_tokens": tokens}, stage=stage)
                verdict = sizer.size(candidate)
                if verdict.dropped:
                    record(candidate, "dropped")
                    note(f"dropped before starting: {candidate.name}: {verdict.dropped}")
        if sizer.size(Candidate()).dropped:
            notes.append("vLLM's defaults do not fit the load: the margin over them is not measured")

        bench_progress = progress
        durations: list[float] = []
        original_instances = instance_count(model)

        def size(candidate: Candidate) -> str | None:
            verdict = sizer.size(candidate)
            if verdict.dropped and candidate.key() not in records:
                record(candidate, "dropped")
                note(f"dropped: {candidate.name}: {verdict.dropped}")
            return verdict.dropped

        def measure(candidate: Candidate) -> Outcome | None:
            nonlocal server, started
            again = candidate.stage == "confirm"  # the search's best, measured once more
            taken = None if again else earlier.get(candidate.key())
            if taken is not None:
                figures = {k: taken[k] for k in ev.MEASURED_KEYS if k in taken}
                record(candidate, "measured", **figures, reused=True)
                note(
                    f"{candidate.name} ({candidate.stage}): measured before ({resume}): goodput "
                    f"{figures['goodput_rps']:g} req/s"
                )
                return Outcome(figures["goodput_rps"], figures[ev.LATENCY])
            now = time.monotonic()
            if deadline is not None:
                expected = sum(durations) / len(durations) if durations else 0.0
                if now + expected > deadline:
                    raise SearchStopped("budget")
            began = now
            note(f"candidate {len(durations) + 1}: {candidate.name} ({candidate.stage}): loading")

            def keep(status: str, **extra: Any) -> None:
                if again:  # the first measurement's entry stays; this one joins it, the score their mean
                    ev.add_run(records[candidate.key()], status, **extra)
                else:
                    record(candidate, status, **extra)

            write_candidate_files(
                work_model, version.path.name, candidate_args(original, candidate),
                config_for(model, candidate, original_instances),
            )  # fmt: skip
            try:
                if server is None:
                    server = ModelServer(plan, model.name, spec.log_path)
                    started += 1
                    server.start(spec.ready_timeout)
                failure = server.reload(spec.ready_timeout)
            except KeyboardInterrupt:
                raise SearchStopped("interrupted") from None
            loaded_s = time.monotonic() - began
            if failure:
                keep("failed", reason=f"did not load: {failure[:2000]}", load_s=round(loaded_s, 1))
                note(f"  failed to load: {failure.splitlines()[0][:300]}")
                durations.append(time.monotonic() - began)
                return None
            bench_spec = BenchSpec(
                model=model.name, url=server.grpc_url, concurrency=spec.concurrency or (
                    None if spec.request_rates else [DEFAULT_CONCURRENCY]
                ), request_rates=spec.request_rates, num_prompts=spec.num_prompts, input_len=spec.input_len,
                output_len=spec.output_len, dataset=spec.dataset, slo=spec.slo, seed=spec.seed, warmup=spec.warmup,
                wait_s=60.0,
            )  # fmt: skip
            try:
                run = bench(bench_spec, bench_progress)
            except BenchError as exc:  # the server stopped answering mid-measurement: the next one gets a new one
                keep("failed", reason=f"{exc}", load_s=round(loaded_s, 1))
                note(f"  failed: {exc}; starting a new server")
                started += server.restarts
                server.stop()
                server = None
                durations.append(time.monotonic() - began)
                return None
            for line in run.notes:  # what bench found about the prompts (the same for every candidate): once
                if line not in notes:
                    notes.append(line)
                    note(line)
            figures = ev.measurement(run.points)
            timing = {"load_s": round(loaded_s, 1), "measure_s": round(time.monotonic() - began - loaded_s, 1)}
            if run.interrupted:
                if not again:  # an interrupted repeat is dropped: the first measurement stands alone
                    record(candidate, "interrupted", **figures, **timing)
                raise SearchStopped("interrupted")
            durations.append(time.monotonic() - began)
            if not figures["points"] or all(p["completed"] == 0 for p in figures["points"]):
                keep("failed", reason="every request failed", **figures, **timing)
                return None
            keep("measured", **figures, **timing)
            note(
                f"  goodput {figures['goodput_rps']:g} req/s, p99 end-to-end {figures[ev.LATENCY]:g} ms, "
                f"SLO {'met' if figures['slo_met'] else 'missed'}"
            )
            return Outcome(figures["goodput_rps"], figures[ev.LATENCY])

        search = Search(axes, size, measure, confirmations=0 if spec.grid else spec.confirm)
        stopped: str | None = None
        try:
            search.grid() if spec.grid else search.run()
        except SearchStopped as stop:
            stopped = stop.reason
        except KeyboardInterrupt:
            stopped = "interrupted"
        finally:
            if server is not None:
                note("stopping the server")
                server.stop()
        evidence = _evidence(spec, run_keys, records, search, stopped, notes, started_at)
        evidence["resumed_from"] = str(resume) if resume is not None else None
        started += server.restarts if server is not None else 0
        evidence["server_restarts"] = max(started - 1, 0)
        winner = search.best if stopped != "interrupted" else None
        if stopped == "interrupted":
            evidence["winner"] = None
        # A best measured once, where the search meant to measure it again: --write does not take it.
        evidence["confirmed"] = winner is not None and (
            not search.confirmations or len(search.repeats.get(winner.key(), ())) > 1
        )
        if winner is not None and not evidence["confirmed"]:
            evidence["notes"].append(
                f"the best, {winner.name}, was measured once: the {stopped or 'search'} ended the run before it was "
                f"measured again (--confirm {spec.confirm}); not written, model.json is kept (more --budget-minutes "
                "confirms it; --confirm 0 takes a best measured once)"
            )
            winner = None
        return TuneResult(evidence, model, version, winner, original, interrupted=stopped == "interrupted")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _gpu(project: Any, has_gpu: bool) -> tuple[Any, int, list[str]]:
    """(the GPU to size for, or None for the CPU's KV cache; how many GPUs the host has; notes)."""
    from vllm_repo.estimate import resolve_gpu

    notes = []
    num_gpus = project.num_gpus or 1
    spec = project.gpu_spec
    if spec is None and has_gpu:
        found = detect_gpus()
        if found is None:
            raise TuneError("this host has an NVIDIA GPU that nvidia-smi does not describe", hint="give --gpu NAME")
        spec, num_gpus = found[0], project.num_gpus or found[1]
    if spec is None:
        notes.append("no NVIDIA GPU: candidates are sized against the CPU's KV cache only")
        return None, 1, notes
    gpu = resolve_gpu(spec)
    if not has_gpu:
        notes.append(f"sized for {gpu.name} (--gpu); the engine runs on this host's CPU, so the figures are the CPU's")
    return gpu, num_gpus, notes


def _run_keys(
    spec: TuneSpec,
    model: ModelDirectory,
    version: VersionDirectory,
    original: dict[str, Any],
    vllm_version: str | None,
    sizer: Sizer,
) -> dict[str, Any]:
    """The evidence's ev.RUN_KEYS: what a run's measurements depend on besides the candidate's own settings."""
    return {
        "model": model.name,
        "version": version.path.name,
        "base_args": original,
        "vllm_version": vllm_version,
        "sized": sizer.where,
        "slo": spec.slo.given(),
        "load": spec.loads(),
        "input_len": None if spec.dataset else spec.input_len,
        "output_len": spec.output_len if spec.dataset else spec.output_tokens,
        "dataset": str(spec.dataset) if spec.dataset else None,
        "num_prompts": spec.num_prompts,
        "seed": spec.seed,
    }


def resumed_candidates(path: Path, run_keys: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """The measured candidates of the tune.json at ``path`` that this run takes, by candidate key."""
    try:
        previous = json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneError(f"{path}: no such file to resume from", hint="run tune without --resume first") from None
    except (OSError, ValueError) as exc:
        raise TuneError(f"{path}: not a tune.json that can be read ({exc})", hint="run without --resume") from None
    if not isinstance(previous, dict) or previous.get("format") != ev.FORMAT:
        raise TuneError(f"{path}: not a tune.json of this vllm-repo", hint="run without --resume")
    # JSON's view of this run, as it would be written: tuples become lists, as in the file.
    taken, differing = ev.reusable(previous, json.loads(json.dumps(run_keys)))
    if differing:
        shown = ", ".join(f"{key} ({_short(previous.get(key))} there)" for key in differing)
        raise TuneError(
            f"{path} measured another run: {shown}",
            hint="resume with the options of that run, or run without --resume to measure afresh",
        )
    return {Candidate.of(c.get("settings") or {}, int(c.get("instances") or 1)).key(): c for c in taken}


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _evidence(
    spec: TuneSpec,
    run_keys: dict[str, Any],
    records: dict[tuple, dict[str, Any]],
    search: Search,
    stopped: str | None,
    notes: list[str],
    started_at: float,
) -> dict[str, Any]:
    candidates = list(records.values())
    measured = [c for c in candidates if c["status"] == "measured"]
    front = pareto_front([(c["name"], Outcome(c["goodput_rps"], c[ev.LATENCY] or math.inf)) for c in measured])
    for c in candidates:
        c["pareto"] = c["name"] in front
    defaults = records.get(Candidate().key())
    best = search.best
    winner = records.get(best.key()) if best is not None else None
    margin = None
    if winner and defaults and defaults["status"] == "measured" and defaults["goodput_rps"]:
        margin = round(winner["goodput_rps"] / defaults["goodput_rps"], 3)
    return {
        "format": ev.FORMAT,
        **run_keys,
        "latency": ev.LATENCY,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - started_at, 1),
        "finished": stopped is None,
        "stopped": stopped,
        "notes": notes,
        "search": "grid" if spec.grid else "coarse to fine",
        "measurements": len(
            [c for c in candidates if c["status"] in ("measured", "failed", "interrupted") and not c.get("reused")]
        )
        + sum(len(c.get("runs") or [None]) - 1 for c in candidates),
        "reused": len([c for c in candidates if c.get("reused")]),
        "candidates": candidates,
        "pareto_front": front,
        "winner": None
        if winner is None
        else {k: winner[k] for k in ("name", "settings", "instances", "goodput_rps", ev.LATENCY)},
        "defaults": None
        if defaults is None or defaults["status"] != "measured"
        else {k: defaults[k] for k in ("goodput_rps", ev.LATENCY)},
        "margin_over_defaults": margin,
        "written": None,
    }
