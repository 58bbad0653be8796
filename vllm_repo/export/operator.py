"""What an operator sets on the pods of `export kubernetes`, each an option with a default: CPU and memory, where the
Hugging Face cache and local weights live, scheduling, the security context, graceful termination, and an optional
HorizontalPodAutoscaler on vLLM's waiting-requests gauge. Options are parsed here (a UsageError names the option);
kubernetes.py puts the pieces into the manifests (plan.py decides what they are).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from vllm_repo.errors import UsageError

GiB = 1024**3
MiB = 1024**2

# CPU: Triton and each engine's core process, plus per GPU its worker (kernel launches, the scheduler's loop,
# detokenization). Requested, never limited: a CPU limit throttles the engine's busy loop and stalls every request.
CPU_BASE = 2
CPU_PER_GPU = 2
# Host memory of the processes: Triton with its Python stub and vLLM imported, per engine its core; per GPU the
# worker's torch and CUDA host allocations. Measured orders of magnitude, rounded up.
MEMORY_BASE_MIB = 2048
MEMORY_PER_ENGINE_MIB = 4096
MEMORY_PER_GPU_MIB = 3072
# The Hugging Face cache volume: the checkpoints it downloads plus room for a revision next to them.
CACHE_HEADROOM = 1.2
CACHE_MIN_GIB = 20
CACHE_UNKNOWN_GIB = 200
# Termination: preStop keeps the pod serving while its endpoints leave the Services (no new requests come), then
# SIGTERM makes Triton refuse new requests and wait for those in flight up to --exit-timeout-secs; the rest of the
# grace period is for the backend's finalize to stop vLLM.
PRESTOP_S = 10
ENGINE_STOP_S = 15
DEFAULT_GRACE_S = 120
# The image's non-root user (the NGC tritonserver images' triton-server).
IMAGE_USER = 1000
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# HPA: the average of vLLM's waiting-requests gauge per serving pod, as a custom metrics adapter (Prometheus
# Adapter) names it: Kubernetes metric names carry no ':', so vllm:num_requests_waiting becomes this.
WAITING_METRIC = "vllm_num_requests_waiting"
DEFAULT_WAITING_TARGET = 4

_QUANTITY = re.compile(r"^(?:\d+(?:\.\d+)?|\.\d+)(?:m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_LABEL_KEY = re.compile(r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _check_quantity(option: str, value: str) -> str:
    if not _QUANTITY.match(value):
        raise UsageError(f"{option} {value!r}: not a Kubernetes quantity", hint="e.g. 8, 500m, 64Gi")
    return value


def _claim(option: str, text: str) -> tuple[str, str]:
    claim, _, sub_path = text.partition("/")
    if not _CLAIM.match(claim):
        raise UsageError(f"{option} {text!r}: {claim!r} is not a PersistentVolumeClaim name")
    return claim, sub_path.strip("/")


@dataclasses.dataclass(frozen=True)
class HfCache:
    """The volume at HF_HOME: a claim the export creates (size None: sized from the checkpoints), an existing claim,
    or an emptyDir (every restart downloads again)."""

    kind: str  # "new", "pvc" or "emptydir"
    claim: str = ""
    size: str | None = None

    @classmethod
    def parse(cls, text: str) -> HfCache:
        kind, _, rest = text.partition(":")
        if kind == "emptydir" and not rest:
            return cls("emptydir")
        if kind == "new":
            return cls("new", size=_check_quantity("--hf-cache new:SIZE", rest) if rest else None)
        if kind == "pvc" and rest:
            claim, sub_path = _claim("--hf-cache", rest)
            if not sub_path:
                return cls("pvc", claim)
        raise UsageError(
            f"--hf-cache {text!r}: not new[:SIZE], pvc:CLAIM or emptydir",
            hint="new makes a PersistentVolumeClaim sized from the checkpoints (new:500Gi to say the size); "
            "pvc:CLAIM mounts a claim you have; emptydir downloads the weights again on every restart",
        )


@dataclasses.dataclass(frozen=True)
class ExtraVolume:
    """An existing claim mounted read-only where model.json expects local weights (``--volume CLAIM[/PATH]:MOUNT``)."""

    claim: str
    sub_path: str
    mount: str

    @classmethod
    def parse(cls, text: str) -> ExtraVolume:
        source, sep, mount = text.partition(":")
        if not sep or not mount.startswith("/") or not source:
            raise UsageError(
                f"--volume {text!r}: not CLAIM[/PATH]:/MOUNT/PATH",
                hint="e.g. --volume weights/llama-3-8b:/data/llama-3-8b mounts the folder llama-3-8b of the claim "
                "weights where model.json names /data/llama-3-8b",
            )
        claim, sub_path = _claim("--volume", source)
        return cls(claim, sub_path, mount.rstrip("/") or "/")


def _label_pair(option: str, text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
        raise UsageError(f"{option} {text!r}: not KEY=VALUE with a label key and value", hint="e.g. gpu=h100")
    return key, value


def _toleration(text: str) -> dict:
    """KEY[=VALUE][:EFFECT]: Equal with a value, Exists without one; every effect when none is given."""
    spec, _, effect = text.partition(":")
    key, sep, value = spec.partition("=")
    if not _LABEL_KEY.match(key) or (sep and not _LABEL_VALUE.match(value)) or (effect and effect not in _EFFECTS):
        raise UsageError(
            f"--toleration {text!r}: not KEY[=VALUE][:EFFECT]",
            hint=f"e.g. dedicated=llm:NoSchedule; EFFECT is one of {', '.join(_EFFECTS)}",
        )
    toleration: dict[str, Any] = {"key": key, "operator": "Equal" if sep else "Exists"}
    if sep:
        toleration["value"] = value
    if effect:
        toleration["effect"] = effect
    return toleration


def _affinity(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--affinity {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--affinity {path}:{exc.lineno}: not JSON ({exc.msg})", hint="give a pod's affinity object as JSON"
        ) from None
    if not isinstance(data, dict) or not data or set(data) - {"nodeAffinity", "podAffinity", "podAntiAffinity"}:
        raise UsageError(
            f"--affinity {path}: not an affinity object",
            hint="a JSON object with nodeAffinity, podAffinity and/or podAntiAffinity, as in a pod spec",
        )
    return data


@dataclasses.dataclass(frozen=True)
class OperatorOptions:
    """The operator's settings, as given (None: sized or defaulted by the export)."""

    cpu: str | None = None
    memory: str | None = None
    hf_cache: str = "new"
    storage_class: str | None = None
    volumes: tuple[str, ...] = ()
    node_selector: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()
    affinity: Path | None = None
    run_as_user: int = IMAGE_USER
    grace_period_s: int = DEFAULT_GRACE_S
    max_replicas: int | None = None
    waiting_target: int = DEFAULT_WAITING_TARGET


@dataclasses.dataclass(frozen=True)
class Operator:
    """The parsed options, ready for the manifests."""

    cpu: str | None
    memory: str | None
    hf_cache: HfCache
    storage_class: str | None
    volumes: list[ExtraVolume]
    node_selector: dict[str, str]
    tolerations: list[dict]
    affinity: dict | None
    run_as_user: int
    grace_period_s: int
    max_replicas: int | None
    waiting_target: int

    @classmethod
    def parse(cls, options: OperatorOptions) -> Operator:
        if options.run_as_user < 0:
            raise UsageError(f"--run-as-user {options.run_as_user}: not a user id")
        least = PRESTOP_S + ENGINE_STOP_S + 5
        if options.grace_period_s < least:
            raise UsageError(
                f"--grace-period {options.grace_period_s}: less than {least} s",
                hint=f"{PRESTOP_S} s for endpoints to drop the pod, {ENGINE_STOP_S} s for vLLM to stop, and time for "
                "the requests in flight",
            )
        if options.max_replicas is not None and options.max_replicas < 2:
            raise UsageError(f"--max-replicas {options.max_replicas}: an autoscaler needs at least 2")
        if options.waiting_target < 1:
            raise UsageError(f"--waiting-target {options.waiting_target}: must be at least 1")
        if options.storage_class is not None and not _CLAIM.match(options.storage_class):
            raise UsageError(f"--storage-class {options.storage_class!r}: not a StorageClass name")
        volumes = [ExtraVolume.parse(v) for v in options.volumes]
        mounts = [v.mount for v in volumes]
        if len(set(mounts)) != len(mounts):
            raise UsageError("--volume: two volumes at the same mount path")
        tolerations = [GPU_TOLERATION, *(_toleration(t) for t in options.tolerations)]
        return cls(
            cpu=_check_quantity("--cpu", options.cpu) if options.cpu else None,
            memory=_check_quantity("--memory", options.memory) if options.memory else None,
            hf_cache=HfCache.parse(options.hf_cache),
            storage_class=options.storage_class,
            volumes=volumes,
            node_selector=dict(_label_pair("--node-selector", s) for s in options.node_selector),
            tolerations=[t for i, t in enumerate(tolerations) if t not in tolerations[:i]],
            affinity=_affinity(options.affinity) if options.affinity else None,
            run_as_user=options.run_as_user,
            grace_period_s=options.grace_period_s,
            max_replicas=options.max_replicas,
            waiting_target=options.waiting_target,
        )

    # ----------------------------------------------------------------------------------------------- pieces --
    @property
    def exit_timeout_s(self) -> int:
        """tritonserver's --exit-timeout-secs: the grace period less preStop and vLLM's own stop."""
        return self.grace_period_s - PRESTOP_S - ENGINE_STOP_S

    def resources(self, gpus: int, engines: int, shm_mib: int, checkpoint_bytes: int | None) -> tuple[dict, str]:
        """The server container's resources, and a comment line that says how they were sized.

        Memory counts /dev/shm (a memory emptyDir is charged to the pod), the processes, and for the limit the
        checkpoint bytes this pod loads: vLLM reads the weights through the page cache, which the pod is charged for.
        """
        cpu = self.cpu or str(CPU_BASE + CPU_PER_GPU * gpus)
        processes_mib = MEMORY_BASE_MIB + MEMORY_PER_ENGINE_MIB * engines + MEMORY_PER_GPU_MIB * gpus
        request_mib = math.ceil((processes_mib + shm_mib) / 1024) * 1024
        if self.memory:
            request = limit = self.memory
            how = f"memory {self.memory} (--memory)"
        else:
            request = quantity(request_mib)
            load_mib = math.ceil(checkpoint_bytes / GiB) * 1024 if checkpoint_bytes else 0
            limit = quantity(request_mib + load_mib)
            how = (
                f"memory {request} = processes {quantity(processes_mib)} + /dev/shm {quantity(shm_mib)}, rounded up; "
                + (
                    f"limit {limit} adds the {quantity(load_mib)} of weights this pod reads"
                    if load_mib
                    else f"limit {limit}: the checkpoint size is unknown offline (--memory sets both)"
                )
            )
        cpu_how = f"cpu {cpu} requested" + (" (--cpu)" if self.cpu else f" = {CPU_BASE} + {CPU_PER_GPU} per GPU")
        resources = {
            "requests": {"cpu": cpu, "memory": request, "nvidia.com/gpu": gpus},
            "limits": {"memory": limit, "nvidia.com/gpu": gpus},
        }
        return resources, f"resources: {cpu_how}, no CPU limit (it would throttle the engine); {how}"

    def cache_size(self, checkpoint_bytes: int | None) -> tuple[str, str]:
        if self.hf_cache.size:
            return self.hf_cache.size, f"{self.hf_cache.size} (--hf-cache)"
        if checkpoint_bytes is None:
            size = f"{CACHE_UNKNOWN_GIB}Gi"
            return size, f"{size}: a checkpoint size is unknown offline (--hf-cache new:SIZE sets it)"
        gib = max(CACHE_MIN_GIB, math.ceil(checkpoint_bytes * CACHE_HEADROOM / GiB))
        return f"{gib}Gi", f"{gib}Gi = {CACHE_HEADROOM:g} x the checkpoints' {checkpoint_bytes / GiB:.0f} GiB"

    def claim_spec(self, size: str, shared: bool) -> dict:
        """A PersistentVolumeClaim's spec; ``shared``: mounted by several pods at once (ReadWriteMany)."""
        spec: dict[str, Any] = {
            "accessModes": ["ReadWriteMany" if shared else "ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        }
        if self.storage_class:
            spec["storageClassName"] = self.storage_class
        return spec

    def shared_storage_notes(self, made_claim: str | None, multi_node: bool) -> list[str]:
        """What to know about storage when several replicas mount the same claims (--max-replicas); ``made_claim``:
        the cache claim the export makes."""
        if not self.max_replicas or multi_node:
            return []
        mounted = [f"{v.claim} (--volume)" for v in self.volumes]
        if made_claim:
            mounted.append(f"{made_claim} (made ReadWriteMany)")
        elif self.hf_cache.kind == "pvc":
            mounted.append(f"{self.hf_cache.claim} (--hf-cache)")
        if not mounted:
            return []
        return [
            f"--max-replicas: up to {self.max_replicas} pods mount {', '.join(mounted)} at once, on any node: their "
            "storage must allow ReadWriteMany (ReadOnlyMany for a --volume claim), e.g. NFS, CephFS or a cloud file "
            "store; name its StorageClass with --storage-class. A ReadWriteOnce volume leaves the replicas Pending"
        ]

    def pod_security(self) -> dict:
        if self.run_as_user == 0:
            return {"seccompProfile": {"type": "RuntimeDefault"}}
        return {
            "runAsNonRoot": True,
            "runAsUser": self.run_as_user,
            "runAsGroup": self.run_as_user,
            # The cache volume becomes writable by the user's group.
            "fsGroup": self.run_as_user,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    @staticmethod
    def container_security() -> dict:
        return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

    @staticmethod
    def lifecycle() -> dict:
        return {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_S)]}}}

    def scheduling(self) -> dict:
        """The pod spec's scheduling fields."""
        out: dict[str, Any] = {}
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        if self.affinity:
            out["affinity"] = self.affinity
        out["tolerations"] = [dict(t) for t in self.tolerations]
        return out

    def autoscaler(self, name: str, labels: dict, target: dict) -> dict | None:
        """An autoscaling/v2 HorizontalPodAutoscaler of ``target`` (a scaleTargetRef) on the average waiting
        requests per serving pod, or None without --max-replicas."""
        if self.max_replicas is None:
            return None
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "scaleTargetRef": target,
                "minReplicas": 1,
                "maxReplicas": self.max_replicas,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": WAITING_METRIC},
                            "target": {"type": "AverageValue", "averageValue": str(self.waiting_target)},
                        },
                    }
                ],
                # A new replica loads its model for minutes: scale down slowly, so load that comes back finds it.
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
        }
