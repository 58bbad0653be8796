"""VR5xx, serving: what the served engine does beyond its GPUs (its metrics, an engine across hosts, the settings
`vllm-repo tune` recorded), read across config.pbtxt, model.json and tune.json."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterator
from typing import Any

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import ModelDirectory
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.repository.tune_record import TUNE_FILE, tuned_settings
from vllm_repo.validate.rules.common import count_text, engine_args_and_config
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule


@rule("VR505", "metrics-without-stats", Severity.WARNING)
def metrics_without_stats(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """REPORT_CUSTOM_METRICS on while model.json sets disable_log_stats: the metrics stay empty.

    vLLM collects the statistics behind its metrics only while log stats are on, so with disable_log_stats true
    Triton's stock vLLM backend publishes metrics that never change, and vllm-repo's backend, as a drop-in for it,
    publishes no vllm:* family at all.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "disable_log_stats": true}
    """
    both = engine_args_and_config(model)
    if both is None:
        return
    doc, data, cfg = both
    param = cfg.config.parameters.get("REPORT_CUSTOM_METRICS")
    if param is None or param.string_value.strip().lower() not in contract.TRUE_STRINGS:
        return
    if data.get("disable_log_stats") is True:
        yield Finding(
            doc.path,
            "REPORT_CUSTOM_METRICS is on in config.pbtxt but disable_log_stats is true: vLLM "
            "collects no stats, so the metrics endpoint has no vllm:* figures that move (Triton's stock backend "
            "publishes frozen ones, the vllm-repo backend none)",
            doc.position_of("disable_log_stats"),
            hint="set disable_log_stats to false, or turn REPORT_CUSTOM_METRICS off",
        )


_LOCAL_ADDRESSES = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


@rule("VR509", "multi-node-engine", Severity.ERROR)
def multi_node_engine(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An engine across hosts that vLLM refuses or that its other hosts can't join.

    vLLM runs one engine on several hosts two ways. With "distributed_executor_backend": "ray" its ranks go to a
    Ray cluster (what Triton's CI runs; nnodes must then stay 1). With the multiprocessing executor, "nnodes" > 1:
    Triton's model is the leader (node_rank 0) and each other host runs `vllm serve MODEL --headless --node-rank K`
    with the same parallel settings; nnodes must divide tensor_parallel_size x pipeline_parallel_size, each host
    gets that quotient of GPUs, and master_addr must be an address the other hosts reach (its default is 127.0.0.1).
    With num-gpus set (the GPUs of one host), a host's share may not exceed it. In the example two hosts would run
    8 GPUs each, but master_addr is left at 127.0.0.1.

    Example::

        # model_repository/llm/config.pbtxt
        backend: "vllm"
        # model_repository/llm/1/model.json
        {"model": "meta-llama/Llama-3.1-70B-Instruct", "tensor_parallel_size": 8, "pipeline_parallel_size": 2,
         "nnodes": 2}
    """
    doc = model.checked_engine_args()
    if doc is None:
        return
    settings = read_engine_settings(doc.data)
    nnodes, size = settings.hosts, settings.parallel_size
    backend = settings.distributed_executor_backend
    where = doc.position_of("nnodes")
    if nnodes <= 1:
        if backend == "ray" and ctx.num_gpus is not None and size > ctx.num_gpus:
            yield _ray_cluster_needed(doc, size, ctx.num_gpus)
        return
    if backend == "ray":
        yield Finding(
            doc.path,
            f'nnodes {nnodes} is the multiprocessing executor\'s multi-node mode; with "distributed_executor_backend": '
            '"ray" vLLM refuses it',
            where,
            hint='drop nnodes (Ray places the ranks on its hosts), or drop "ray" to use the multiprocessing executor',
        )
        return
    if size % nnodes:
        yield Finding(
            doc.path,
            f"nnodes {nnodes} does not divide tensor_parallel_size x pipeline_parallel_size = {size}: vLLM refuses it",
            where,
            hint=f"use an nnodes that divides {size}, each host running {size} / nnodes GPUs",
        )
        return
    yield from _leader_findings(doc, ctx, nnodes, size)


def _ray_cluster_needed(doc: JsonDocument, size: int, gpus_per_host: int) -> Finding:
    """An INFO: a Ray engine larger than one host waits for a cluster with all its GPUs."""
    hosts = math.ceil(size / gpus_per_host)
    return Finding(
        doc.path,
        f"the engine spans {count_text(hosts)} hosts of {count_text(gpus_per_host)} GPUs on Ray: the cluster "
        f"must have {count_text(size)} GPUs before the model loads (vLLM waits up to 30 minutes for them)",
        doc.position_of("distributed_executor_backend"),
        severity=Severity.INFO,
        hint="start the head with `ray start --head`, each other host with `ray start --address=HEAD:6379`, "
        "and Triton on the head (RAY_ADDRESS, VLLM_HOST_IP set to the host's own address on every host)",
    )


def _leader_findings(doc: JsonDocument, ctx: CheckContext, nnodes: int, size: int) -> Iterator[Finding]:
    """The multiprocessing executor across ``nnodes`` hosts, Triton's model its leader: each host's share of the
    GPUs, the leader's node_rank, and a master_addr the other hosts reach."""
    where = doc.position_of("nnodes")
    per_host = size // nnodes
    if ctx.num_gpus is not None and per_host > ctx.num_gpus:
        yield Finding(
            doc.path,
            f"each of the {nnodes} hosts runs {count_text(per_host)} GPUs of the engine, but a host has "
            f"{count_text(ctx.num_gpus)} (num-gpus)",
            where,
            hint=f"use nnodes {math.ceil(size / ctx.num_gpus)} or more (dividing {size}), or lower the parallel sizes",
        )
    rank = doc.data.get("node_rank", 0)
    if rank not in (0, None):
        yield Finding(
            doc.path,
            f"node_rank {rank}: Triton's model is the engine's leader and must be node_rank 0",
            doc.position_of("node_rank"),
            hint=f"set node_rank 0 here; the other hosts run `vllm serve MODEL --headless --nnodes {nnodes} "
            "--node-rank K --master-addr THIS_HOST` with the same parallel settings",
        )
    address = doc.data.get("master_addr")
    if address is None or str(address).strip() in _LOCAL_ADDRESSES:
        yield Finding(
            doc.path,
            f"master_addr is {address or 'not set (vLLM uses 127.0.0.1)'}: the engine's other hosts can't reach "
            "this one there",
            doc.position_of("master_addr") or where,
            hint="set master_addr to this host's address on the network the hosts share; each other host then runs "
            f"`vllm serve MODEL --headless --nnodes {nnodes} --node-rank K --master-addr THAT_ADDRESS`",
        )


@rule("VR510", "untuned-settings", Severity.WARNING)
def untuned_settings(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """model.json no longer has the settings `vllm-repo tune --write` chose and recorded in tune.json.

    tune measures candidates under an SLO and writes the winner into model.json, keeping the evidence (the SLO, the
    load, every candidate's figures) beside the model in tune.json. Once model.json changes one of the tuned
    settings, that evidence describes another engine: the goodput and latency it promises are not measured for what
    is served. A key tune removed (vLLM's default won) counts as tuned too.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/tune.json
        {"written": {"version": "1", "settings": {"max_num_seqs": 64, "max_num_batched_tokens": null}}}
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_num_seqs": 256}
    """
    path = model.path / TUNE_FILE
    if not path.is_file():
        return
    tuned = tuned_settings(path)
    if tuned is None:
        return
    version, settings = tuned
    docs = [doc for v, doc in model.engine_args_documents() if v.path.name == version]
    if not docs or not docs[0].ok or not isinstance(docs[0].data, dict):
        return
    doc, data = docs[0], docs[0].data
    for key, wanted in sorted(settings.items()):
        have = data.get(key)
        if _same_setting(have, wanted):
            continue
        now = "leaves it out" if key not in data else f"sets {json.dumps(have)}"
        chosen = "left it to vLLM's default" if wanted is None else f"chose {json.dumps(wanted)}"
        yield Finding(
            doc.path,
            f"{key}: model.json {now}, but vllm-repo tune {chosen} ({path.name}): the tuned goodput and latency "
            "were not measured for these settings",
            doc.position_of(key) if key in data else None,
            hint=f"run `vllm-repo tune {shlex.quote(str(model.path.parent))} --model {shlex.quote(model.name)} "
            f"--write` again (with the SLO you tuned for) for the settings you serve, or put the tuned value back "
            f"(delete {path.name} to drop the check)",
        )


def _same_setting(have: Any, wanted: Any) -> bool:
    """Whether a model.json value is the tuned one; a quoted value ("2", "true") counts as what it spells."""
    if have == wanted and type(have) is type(wanted):
        return True
    if have is None or wanted is None:
        return False
    return str(have).strip().lower() == json.dumps(wanted).strip('"').lower()
