"""`export kubernetes`, the manifests: a plan (plan.py) rendered as the objects that serve a model repository with
Triton's vLLM backend on Kubernetes.

A repository whose engines fit on one node becomes a Deployment and a Service. One whose engine needs more GPUs than
a node has (tensor_parallel_size x pipeline_parallel_size > --gpus-per-node) becomes a LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1, the pattern vLLM documents for multi-node serving): the leader pod starts a Ray head,
waits for the workers' GPUs, then runs tritonserver, whose vLLM engine (distributed_executor_backend "ray") places
its workers on the Ray cluster; each worker pod only joins Ray. A Service selects the leader.

What the pods get:

- an image built from the NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container whose vLLM is the repository's
  release (serve/container.py, the rule `launch --docker` follows) plus vllm-repo, whose bundled backend replaces the
  container's own (dockerfile.py writes its Dockerfile); the repository is validated against that container's vLLM.
  A container whose vLLM the bundled backend cannot drive serves as it is, with its own backend, and says so;
- tritonserver with `launch --docker`'s command line, and with --openai-port the OpenAI gateway in a second
  container of the same pod;
- the repository at /models, from a ConfigMap of its files, a PersistentVolumeClaim, or an init container that
  copies it from an image;
- /dev/shm as a memory emptyDir: Triton's Python backend passes tensors through shared memory and vLLM's
  multiprocessing executor puts its message queues there (segments of 160 and 240 MiB), Ray its object store;
- GPUs from TP x PP; CPU and memory sized from the engines and checkpoints (operator.py); ports 8000 (HTTP), 8001
  (gRPC), 8002 (metrics);
- the Hugging Face cache on a PersistentVolumeClaim, local weights on claims of the user's (--volume);
- a startupProbe on /v2/health/ready whose budget is the estimated load time (checkpoint bytes / a stated read
  bandwidth + engine start, with a margin), readiness on /v2/health/ready, liveness on /v2/health/live;
- a non-root security context, a grace period with a preStop, scheduling options, and optionally an autoscaler;
- HF_TOKEN from a Secret reference (never the token itself).

What each of these is (the layout, the image, the budgets, the findings) is the plan's to decide; this module only
writes it down as objects.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec

from vllm_repo.diagnostics.diagnostic import Diagnostic
from vllm_repo.errors import UsageError
from vllm_repo.export.dockerfile import DOCKERFILE, ImageBuild
from vllm_repo.export.operator import Operator, quantity
from vllm_repo.export.plan import (
    KubernetesPlan,
    Source,
    plan_kubernetes,
)
from vllm_repo.export.pods import (
    HF_HOME,
    HF_TOKEN_KEY,
    LWS_NAME_LABEL,
    PROBE_PERIOD_S,
    REPOSITORY_MOUNT,
    Gateway,
    PodParts,
)

# A ConfigMap holds at most 1 MiB (etcd's object limit); keep room for the object's own fields.
CONFIGMAP_LIMIT = 1_000_000
_CONFIGMAP_KEY = re.compile(r"[^-._a-zA-Z0-9]")


@dataclasses.dataclass
class KubernetesExport:
    name: str
    multi_node: bool
    image: str  # the image the pods run
    documents: list[tuple[dict[str, Any], list[str]]]  # (object, the comments above it)
    notes: list[str]
    findings: list[Diagnostic] = dataclasses.field(default_factory=list)  # what to fix before applying: warnings
    build: ImageBuild | None = None  # the Dockerfile of ``image``; None when the pods run the base image as is
    storage_notes: list[str] = dataclasses.field(default_factory=list)  # what the claims' storage must allow

    @property
    def text(self) -> str:
        from vllm_repo.export.yaml import dump_all

        return dump_all(self.documents)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [doc for doc, _ in self.documents]


# ------------------------------------------------------------------------------------------------- export --
P = ParamSpec("P")


def _rendered(plan: Callable[P, KubernetesPlan]) -> Callable[P, KubernetesExport]:
    def export(*args: P.args, **kwargs: P.kwargs) -> KubernetesExport:
        return render(plan(*args, **kwargs))

    return export


# Typed with plan_kubernetes's own parameters, which it takes as they are.
export_kubernetes = _rendered(plan_kubernetes)
export_kubernetes.__doc__ = """The manifests that serve ``repository``: a Deployment + Service, or a LeaderWorkerSet +
Service when an engine needs more GPUs than ``gpus_per_node``; with a ConfigMap first when the repository comes from
one, a PersistentVolumeClaim for the Hugging Face cache, and an autoscaler when asked. ``image`` is the image the pods
run, built from ``base_image`` (default: the NGC container of the repository's vLLM) by the Dockerfile of the result's
``build``. ``render(plan_kubernetes(...))``, with plan_kubernetes's parameters."""


def render(plan: KubernetesPlan) -> KubernetesExport:
    """The plan's objects, each with the comment lines above it: the ConfigMap of the repository's files where it
    comes from one, the Hugging Face cache's claim, the Deployment or LeaderWorkerSet, its Service, the autoscaler."""
    root, name, ops, layout = plan.root, plan.name, plan.operator, plan.layout
    labels = {"app.kubernetes.io/name": "triton-vllm", "app.kubernetes.io/instance": name}
    documents: list[tuple[dict, list[str]]] = []
    items: list[dict] = []
    if plan.source.kind == "configmap":
        configmap, items = _configmap(name, root, labels)
        documents.append(
            (configmap, [f"The files of the model repository {root.name}, mounted at {REPOSITORY_MOUNT}."])
        )
    resources, resources_note = ops.resources(layout.node_gpus, len(plan.models), plan.shm_mib, plan.pod_share)
    # Several pods at once mount a claim the export makes for a Deployment that autoscales: ReadWriteMany.
    cache_volume, cache_claims, cache_note = _hf_cache(name, labels, ops, plan.hub_checkpoints, layout.multi_node)
    parts = _pod_parts(
        plan.image,
        _repository_volume(plan.source, name, items),
        cache_volume,
        plan.hf_token_secret,
        plan.shm_mib,
        resources,
        plan.budget_s,
        ops,
        plan.gateway,
    )
    title = f"Triton Inference Server with the vLLM backend for the model repository {root.name}."
    details = [
        *(f"warning: {f.location()}: [{f.code}] {f.message}" for f in plan.findings),
        *plan.notes,
        *plan.budget_notes,
        resources_note,
        cache_note,
        f"/dev/shm: {quantity(plan.shm_mib)} memory emptyDir; HF_TOKEN from the Secret {plan.hf_token_secret} "
        f"(key {HF_TOKEN_KEY}, optional): kubectl create secret generic {plan.hf_token_secret} "
        f"--from-literal={HF_TOKEN_KEY}=...",
        f"terminationGracePeriodSeconds {ops.grace_period_s}: preStop sleeps while the endpoints drop the pod, then "
        f"Triton refuses new requests and waits {ops.exit_timeout_s} s for those in flight",
    ]
    if plan.build is not None:
        details.append("build the image: " + " && ".join(c.split("   #")[0] for c in plan.build.commands()))
    for claim_doc in cache_claims:
        documents.append((claim_doc, [f"The Hugging Face cache of {name} at {HF_HOME}: {cache_note}."]))
    if not layout.multi_node:
        from vllm_repo.export.pods import deployment, service

        workload = deployment(name, labels, parts)
        documents.append((workload, [title, *details]))
        selector = dict(labels)
        scale_target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    else:
        from vllm_repo.export.pods import leader_worker_set, service

        spans = (
            f"{layout.largest}: TP x PP = {layout.world} GPUs on {layout.nodes} nodes of {layout.node_gpus} "
            "(LeaderWorkerSet, needs the LWS controller); the leader runs the Ray head and tritonserver, the workers "
            "join Ray" + ("" if plan.build is not None else "; the image must have Ray")
        )
        claims = [] if cache_volume is not None else _per_pod_claims(ops, plan.hub_checkpoints)
        workload = leader_worker_set(name, labels, parts, layout.nodes, layout.world, layout.node_gpus, claims)
        documents.append((workload, [title, spans, *details]))
        selector = {LWS_NAME_LABEL: name, "role": "leader"}
        scale_target = {"apiVersion": workload["apiVersion"], "kind": "LeaderWorkerSet", "name": name}
    where = "ports" if not layout.multi_node else "ports on the leader pod"
    gateway_note = " and the OpenAI API" if plan.gateway is not None else ""
    documents.append((service(name, labels, selector, plan.gateway), [f"Triton's {where}{gateway_note} of {name}."]))
    hpa = ops.autoscaler(name, labels, scale_target)
    if hpa is not None:
        documents.append((hpa, _autoscaler_comments(ops, layout.multi_node)))
    shared = ops.shared_storage_notes(f"{name}-hf-cache" if cache_claims else None, layout.multi_node)
    return KubernetesExport(
        name, layout.multi_node, plan.image, documents, plan.notes, plan.findings, plan.build, shared
    )


# -------------------------------------------------------------------------------------------------- objects --
def _repository_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if path.is_file():
            files.append(path)
    return files


def _configmap(name: str, root: Path, labels: dict) -> tuple[dict, list[dict]]:
    """A ConfigMap of the repository's files, and the volume items that put them back in their folders."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    items, total = [], 0
    for path in _repository_files(root):
        rel = path.relative_to(root).as_posix()
        key = _CONFIGMAP_KEY.sub("-", rel.replace("/", "__"))
        if key in data or key in binary:
            raise UsageError(
                f"{root}: two files map to the ConfigMap key {key!r}",
                hint="rename one, or serve the repository from a claim (--repository-from pvc:CLAIM)",
            )
        raw = path.read_bytes()
        total += len(raw)
        if total > CONFIGMAP_LIMIT:
            raise UsageError(
                f"{root}: the repository's files exceed what a ConfigMap holds (1 MiB), from {rel} on",
                hint="serve it from a claim (--repository-from pvc:CLAIM) or an image (--repository-from image:IMAGE)",
            )
        try:
            data[key] = raw.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(raw).decode("ascii")
        items.append({"key": key, "path": rel})
    if not items:
        raise UsageError(f"{root}: no files to put in a ConfigMap")
    configmap: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-repository", "labels": labels},
    }
    if data:
        configmap["data"] = data
    if binary:
        configmap["binaryData"] = binary
    return configmap, items


def _repository_volume(source: Source, name: str, items: list[dict]) -> tuple[dict, dict, list[dict]]:
    """(volume, its mount in the server container, init containers)."""
    if source.kind == "configmap":
        volume = {"name": "model-repository", "configMap": {"name": f"{name}-repository", "items": items}}
        return volume, {"name": "model-repository", "mountPath": REPOSITORY_MOUNT, "readOnly": True}, []
    if source.kind == "pvc":
        volume = {"name": "model-repository", "persistentVolumeClaim": {"claimName": source.ref, "readOnly": True}}
        mount = {"name": "model-repository", "mountPath": REPOSITORY_MOUNT, "readOnly": True}
        if source.sub_path:
            mount["subPath"] = source.sub_path
        return volume, mount, []
    init = {
        "name": "copy-repository",
        "image": source.ref,
        "command": ["sh", "-c", f"cp -a {REPOSITORY_MOUNT}/. /mnt/repository/"],
        "volumeMounts": [{"name": "model-repository", "mountPath": "/mnt/repository"}],
    }
    volume = {"name": "model-repository", "emptyDir": {}}
    return volume, {"name": "model-repository", "mountPath": REPOSITORY_MOUNT, "readOnly": True}, [init]


def _hf_cache(
    name: str, labels: dict, ops: Operator, checkpoints: int | None, multi_node: bool
) -> tuple[dict | None, list[dict], str]:
    """(the cache's pod volume, or None for one claim per pod; the claims to create; a note)."""
    from vllm_repo.export.pods import claim

    kind = ops.hf_cache.kind
    if kind == "emptydir":
        return (
            {"name": "hf-cache", "emptyDir": {}},
            [],
            "an emptyDir (--hf-cache emptydir): every restart downloads again",
        )
    if kind == "pvc":
        every_pod = " (ReadWriteMany: every pod mounts it)" if multi_node or ops.max_replicas else ""
        volume = {"name": "hf-cache", "persistentVolumeClaim": {"claimName": ops.hf_cache.claim}}
        return volume, [], f"the existing claim {ops.hf_cache.claim}{every_pod}"
    size, how = ops.cache_size(checkpoints)
    if multi_node:
        return None, [], f"a claim per pod (volumeClaimTemplates), {how}"
    shared = ops.max_replicas is not None
    claim_name = f"{name}-hf-cache"
    volume = {"name": "hf-cache", "persistentVolumeClaim": {"claimName": claim_name}}
    mode = "ReadWriteMany: the autoscaler's replicas share it" if shared else "ReadWriteOnce"
    return volume, [claim(claim_name, labels, ops.claim_spec(size, shared))], f"the claim {claim_name}, {how}, {mode}"


def _per_pod_claims(ops: Operator, checkpoints: int | None) -> list[dict]:
    size, _ = ops.cache_size(checkpoints)
    return [{"metadata": {"name": "hf-cache"}, "spec": ops.claim_spec(size, False)}]


def _autoscaler_comments(ops: Operator, multi_node: bool) -> list[str]:
    return [
        f"Scales 1 to {ops.max_replicas} replicas on the average of vLLM's vllm:num_requests_waiting per serving pod "
        f"(target {ops.waiting_target}), read from Triton's metrics port 8002.",
        "Needs a custom metrics adapter that serves it as vllm_num_requests_waiting, e.g. Prometheus Adapter with a "
        'rule (seriesQuery \'vllm:num_requests_waiting{namespace!="",pod!=""}\', name as '
        "vllm_num_requests_waiting, metricsQuery 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'), and a "
        "Prometheus that scrapes the pods (the prometheus.io annotations, or a PodMonitor on port 8002).",
        *(
            ["The LeaderWorkerSet's scale subresource selects its leader pods, where the engine's gauges are."]
            if multi_node
            else []
        ),
    ]


def _pod_parts(
    image: str,
    repository_volume: tuple[dict, dict, list[dict]],
    cache_volume: dict | None,
    hf_token_secret: str,
    shm_mib: int,
    resources: dict,
    budget_s: int,
    ops: Operator,
    gateway: Gateway | None,
) -> PodParts:
    from vllm_repo.export.pods import VLLM_CACHE_ROOT

    volume, mount, init_containers = repository_volume
    env: list[dict] = [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": hf_token_secret, "key": HF_TOKEN_KEY, "optional": True}},
        },
        {"name": "HF_HOME", "value": HF_HOME},
        {"name": "VLLM_CACHE_ROOT", "value": VLLM_CACHE_ROOT},
    ]
    volumes = [volume, {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(shm_mib)}}]
    if cache_volume is not None:
        volumes.append(cache_volume)
    mounts = [mount, {"name": "dshm", "mountPath": "/dev/shm"}, {"name": "hf-cache", "mountPath": HF_HOME}]
    for i, extra in enumerate(ops.volumes):
        claim = {"claimName": extra.claim, "readOnly": True}
        volumes.append({"name": f"weights-{i}", "persistentVolumeClaim": claim})
        extra_mount = {"name": f"weights-{i}", "mountPath": extra.mount, "readOnly": True}
        if extra.sub_path:
            extra_mount["subPath"] = extra.sub_path
        mounts.append(extra_mount)
    return PodParts(image, env, volumes, mounts, resources, init_containers, budget_s // PROBE_PERIOD_S, ops, gateway)


def write_export(result: KubernetesExport, output: Path, *, force: bool = False) -> list[Path]:
    """Write the manifests to OUTPUT/<name>.yaml and the image's Dockerfile to OUTPUT/Dockerfile; an existing file is
    replaced only with ``force`` (and then none is written unless all may be)."""
    from vllm_repo.files import write_atomic

    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output}: not a directory")
    files = {output / f"{result.name}.yaml": result.text}
    if result.build is not None:
        files[output / DOCKERFILE] = result.build.text
    for target in files:
        if target.exists() and not force:
            raise UsageError(f"{target} exists", hint="pass --force to replace it, or another --output")
    for target, text in files.items():
        write_atomic(target, text)
    return list(files)
