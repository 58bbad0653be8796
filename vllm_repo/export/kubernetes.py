"""`export kubernetes`: manifests that serve a model repository with Triton's vLLM backend on Kubernetes.

A repository whose engines fit on one node becomes a Deployment and a Service. One whose engine needs more GPUs than
a node has (tensor_parallel_size x pipeline_parallel_size > --gpus-per-node) becomes a LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1, the pattern vLLM documents for multi-node serving): the leader pod starts a Ray head,
waits for the workers' GPUs, then runs tritonserver, whose vLLM engine (distributed_executor_backend "ray") places
its workers on the Ray cluster; each worker pod only joins Ray. A Service selects the leader.

What the pods get:

- the NGC ``tritonserver:<yy.mm>-vllm-python-py3`` image whose vLLM is the repository's release (releases/ngc.py, the
  release from --vllm-version, the project settings, the serving Python or the installed vLLM), or --image;
- the repository at /models, from a ConfigMap of its files, a PersistentVolumeClaim, or an init container that
  copies it from an image;
- /dev/shm as a memory emptyDir: Triton's Python backend passes tensors through shared memory and vLLM's
  multiprocessing executor puts its message queues there (segments of 160 and 240 MiB), Ray its object store;
- GPUs from TP x PP; ports 8000 (HTTP), 8001 (gRPC), 8002 (metrics);
- a startupProbe on /v2/health/ready whose budget is the estimated load time (checkpoint bytes / a stated read
  bandwidth + engine start, with a margin), readiness on /v2/health/ready, liveness on /v2/health/live;
- HF_TOKEN from a Secret reference (never the token itself).
"""

from __future__ import annotations

import base64
import dataclasses
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_repo.errors import UsageError, VllmRepoError

if TYPE_CHECKING:
    from vllm_repo.repository import ModelDirectory

# ------------------------------------------------------------------------------------------------ settings --
DEFAULT_GPUS_PER_NODE = 8
# The read (or download) bandwidth the load-time estimate assumes, in MB/s: a network volume or the Hugging Face
# Hub; local NVMe is several times faster.
DEFAULT_READ_MB_S = 500
# vLLM's engine start after the weights are read (profiling, KV cache, torch.compile and CUDA graph capture): about
# 80 s measured for TP=2 on an H200 with vLLM 0.26; 120 s leaves room for larger models.
ENGINE_START_S = 120
# A model whose checkpoint size can't be read offline (a Hub id not in the local cache) gets this budget.
DEFAULT_MODEL_LOAD_S = 1200
# Ray: the workers join the head before the engine can place its workers.
RAY_CLUSTER_S = 60
LOAD_MARGIN = 1.5
PROBE_PERIOD_S = 10

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
RAY_PORT = 6379
REPOSITORY_MOUNT = "/models"
HF_HOME = "/hf-cache"
TRITON_VLLM_BACKEND_DIR = "/opt/tritonserver/backends/vllm"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"

MiB = 1024 * 1024
# /dev/shm: Triton's Python backend regions (they grow with the tensors of the requests in flight), plus per vLLM
# engine its multiprocessing message queues (160 + 240 MiB, rounded up), and at least launch --docker's 2 GiB.
SHM_BASE_MIB = 1024
SHM_PER_ENGINE_MIB = 512
SHM_MIN_MIB = 2048
# Ray's object store lives in /dev/shm too; vLLM passes little through it, so it is capped rather than Ray's
# default of 30% of the node's memory.
RAY_OBJECT_STORE_MIB = 2048

# A ConfigMap holds at most 1 MiB (etcd's object limit); keep room for the object's own fields.
CONFIGMAP_LIMIT = 1_000_000
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# Names become pod names with suffixes (<name>-<group>-<worker>), which must stay within 63 characters.
MAX_NAME = 40
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CONFIGMAP_KEY = re.compile(r"[^-._a-zA-Z0-9]")


# ---------------------------------------------------------------------------------------------------- model --
@dataclasses.dataclass(frozen=True)
class Source:
    """Where the pods find the repository."""

    kind: str  # "configmap", "pvc" or "image"
    ref: str = ""  # the claim or the image
    sub_path: str = ""  # in the claim

    @classmethod
    def parse(cls, text: str) -> Source:
        kind, _, ref = text.partition(":")
        if kind == "configmap" and not ref:
            return cls("configmap")
        if kind == "pvc" and ref:
            claim, _, sub_path = ref.partition("/")
            if claim:
                return cls("pvc", claim, sub_path.strip("/"))
        if kind == "image" and ref:
            return cls("image", ref)
        raise UsageError(
            f"--repository-from {text!r}: not configmap, pvc:CLAIM[/PATH] or image:IMAGE",
            hint="configmap puts the repository's files in a ConfigMap; pvc:models/repo mounts the claim 'models' "
            "(its folder repo); image:registry/repo:tag copies the image's /models in an init container",
        )


@dataclasses.dataclass(frozen=True)
class ModelLoad:
    name: str
    gpus: int  # TP x PP
    checkpoint_bytes: int | None
    seconds: int
    note: str


@dataclasses.dataclass
class KubernetesExport:
    name: str
    multi_node: bool
    image: str
    documents: list[tuple[dict[str, Any], list[str]]]  # (object, the comments above it)
    notes: list[str]

    @property
    def text(self) -> str:
        from vllm_repo.export.yaml import dump_all

        return dump_all(self.documents)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [doc for doc, _ in self.documents]


# -------------------------------------------------------------------------------------------------- helpers --
def _name_for(name: str | None, root: Path) -> str:
    if name is not None:
        if not _DNS_1035.match(name) or len(name) > MAX_NAME:
            raise UsageError(
                f"--name {name!r}: not a Kubernetes name",
                hint=f"lower-case letters, digits and '-', starting with a letter, at most {MAX_NAME} characters",
            )
        return name
    derived = re.sub(r"[^a-z0-9]+", "-", root.name.lower()).strip("-")
    derived = re.sub(r"^[^a-z]+", "", derived)[:MAX_NAME].rstrip("-")
    return derived or "triton"


def _quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _model_load(model: ModelDirectory, read_mb_s: float) -> ModelLoad:
    """The load time of one model: its checkpoint read at ``read_mb_s``, plus the engine start."""
    settings = model.engine_settings()
    gpus = settings.parallel_size
    inner = settings.model
    if not inner:
        return ModelLoad(model.name, gpus, None, DEFAULT_MODEL_LOAD_S, f'{model.name}: no "model" key in model.json')
    try:
        from vllm_repo.estimate.model_facts import load_model_facts
        from vllm_repo.estimate.weights import weights_per_rank

        doc = model.served_engine_args()
        facts = load_model_facts(inner, offline=True, base=doc.path.parent if doc is not None else None)
        if facts.weights is not None:
            size, how = facts.weights.total_bytes, facts.weights.source
        else:
            counted = weights_per_rank(facts, dtype=settings.dtype)
            size, how = counted.total_bytes, "parameter count from config.json"
    except VllmRepoError as exc:
        return ModelLoad(
            model.name,
            gpus,
            None,
            DEFAULT_MODEL_LOAD_S,
            f"{model.name}: checkpoint size unknown offline ({exc.message.split(';')[0]}); "
            f"{DEFAULT_MODEL_LOAD_S} s assumed",
        )
    read_s = size / (read_mb_s * 1e6)
    seconds = math.ceil(read_s + ENGINE_START_S)
    return ModelLoad(
        model.name,
        gpus,
        size,
        seconds,
        f"{model.name}: {size / 1e9:.1f} GB ({how}) at {read_mb_s:g} MB/s = {read_s:.0f} s, "
        f"+ {ENGINE_START_S} s engine start",
    )


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


def _probes(failure_threshold: int) -> dict:
    def get(path: str) -> dict:
        return {"path": path, "port": "http"}

    return {
        "startupProbe": {
            "httpGet": get("/v2/health/ready"),
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": failure_threshold,
        },
        "readinessProbe": {"httpGet": get("/v2/health/ready"), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 3},
        "livenessProbe": {"httpGet": get("/v2/health/live"), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 6},
    }


def _server_ports() -> list[dict]:
    return [
        {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
    ]


def _service(name: str, labels: dict, selector: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
                for p in _server_ports()
            ],
        },
    }


def _tritonserver_args() -> list[str]:
    return [
        "tritonserver",
        f"--model-repository={REPOSITORY_MOUNT}",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
    ]


def _choose_image(image: str | None, vllm_version: str | None, root: Path) -> tuple[str, str]:
    if image:
        return image, f"image {image} (--image)"
    from vllm_repo.releases.ngc import container_for_vllm
    from vllm_repo.schema.loader import target_vllm_version

    wanted, why = target_vllm_version(vllm_version, root)
    match = container_for_vllm(wanted)
    origin = f"vLLM {wanted} from {why}" if wanted else why
    return match.release.image, f"image {match.release.image}: {match.reason} ({origin})"


# ------------------------------------------------------------------------------------------------- layout --
@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """How the repository's engines sit on nodes: one node, or the largest engine's TP x PP across ``nodes`` nodes."""

    world: int  # the largest engine's TP x PP
    node_gpus: int  # the GPUs each pod asks for
    nodes: int  # pods in the LeaderWorkerSet; 1 on one node
    largest: str  # the model with the largest engine
    notes: list[str]

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def _check_options(repository: str | Path, gpus_per_node: int, read_mb_s: float, hf_token_secret: str) -> Path:
    root = Path(repository)
    if not root.is_dir():
        raise UsageError(f"{repository}: no such directory")
    if gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node {gpus_per_node}: must be at least 1")
    if not read_mb_s > 0:
        raise UsageError(f"--read-bandwidth {read_mb_s}: must be more than 0 MB/s")
    if not _DNS_1035.match(hf_token_secret.replace(".", "-")):
        raise UsageError(f"--hf-token-secret {hf_token_secret!r}: not a Kubernetes Secret name")
    return root


def _node_layout(repository: str | Path, vllm_models: list, gpus_per_node: int) -> NodeLayout:
    """One node when every engine fits on ``gpus_per_node`` GPUs (as config.pbtxt places them), else the one model's
    engine across nodes with vLLM's Ray executor. Raises UsageError for what cannot be served either way."""
    largest = max(vllm_models, key=lambda m: m.engine_settings().parallel_size)
    settings = largest.engine_settings()
    world = settings.parallel_size
    if world <= gpus_per_node:
        return NodeLayout(world, _one_node_gpus(repository, vllm_models, gpus_per_node), 1, largest.name, [])
    if len(vllm_models) > 1:
        raise UsageError(
            f"{repository}: {largest.name} needs {world} GPUs, more than one node's {gpus_per_node}, and a "
            "repository that spans nodes must hold that one vLLM model",
            hint=f"export {largest.name} from a repository of its own",
        )
    backend = settings.distributed_executor_backend
    if backend != "ray":
        doc = largest.served_engine_args()
        where = doc.path if doc else largest.name
        spans = f"{where}: tensor_parallel_size x pipeline_parallel_size = {world} spans nodes of {gpus_per_node} GPUs"
        raise UsageError(
            f"{spans}, which needs vLLM's Ray executor; distributed_executor_backend is {backend!r}"
            if backend is not None
            else f"{spans}, which needs vLLM's Ray executor, and distributed_executor_backend is not set (vLLM would "
            "refuse: fewer GPUs on the node than the world size)",
            hint='set "distributed_executor_backend": "ray" in model.json, or --gpus-per-node to the GPUs a '
            "node really has",
        )
    node_gpus = math.ceil(world / math.ceil(world / gpus_per_node))
    notes = []
    tp = settings.tp
    if tp > node_gpus:
        notes.append(
            f"{largest.name}: tensor_parallel_size {tp} crosses nodes of {node_gpus} GPUs; vLLM recommends "
            "TP = GPUs per node and PP = nodes"
        )
    return NodeLayout(world, node_gpus, math.ceil(world / node_gpus), largest.name, notes)


def _one_node_gpus(repository: str | Path, vllm_models: list, gpus_per_node: int) -> int:
    """The GPUs one node needs for every engine where config.pbtxt places it."""
    from vllm_repo.repository.placement import engines

    need = 1
    for engine in engines(vllm_models, 0.9):
        need = max(need, max(engine.gpus) + 1 if engine.gpus else engine.settings.parallel_size)
    if need > gpus_per_node:
        raise UsageError(
            f"{repository}: its models are placed on {need} GPUs, more than one node's {gpus_per_node}",
            hint="check the instance_group gpus in config.pbtxt, or give --gpus-per-node",
        )
    return need


def _startup_budget(loads: list[ModelLoad], multi_node: bool) -> tuple[int, list[str]]:
    """The startupProbe's budget in seconds (whole probe periods), and the comment lines that explain it."""
    load_s = sum(load.seconds for load in loads) + (RAY_CLUSTER_S if multi_node else 0)
    budget_s = math.ceil(load_s * LOAD_MARGIN / PROBE_PERIOD_S) * PROBE_PERIOD_S
    budget_note = (
        f"startupProbe: {budget_s} s = {LOAD_MARGIN:g} x ("
        + " + ".join(f"{load.name} {load.seconds} s" for load in loads)
        + (f" + Ray cluster {RAY_CLUSTER_S} s" if multi_node else "")
        + ")"
    )
    return budget_s, [budget_note, *(f"  {load.note}" for load in loads)]


def _shm_mib(engines_count: int, multi_node: bool) -> int:
    shm_mib = max(SHM_MIN_MIB, SHM_BASE_MIB + SHM_PER_ENGINE_MIB * engines_count)
    return shm_mib + RAY_OBJECT_STORE_MIB if multi_node else shm_mib


# -------------------------------------------------------------------------------------------------- pods --
@dataclasses.dataclass(frozen=True)
class PodParts:
    """What every server pod has, whichever manifest holds it: the image, the environment, the volumes and their
    mounts, the GPUs, the init containers that fill the repository volume, and the startup budget in probe periods."""

    image: str
    env: list[dict]
    volumes: list[dict]
    mounts: list[dict]
    resources: dict
    init_containers: list[dict]
    startup_periods: int

    def pod(self, container: dict) -> dict[str, Any]:
        pod: dict[str, Any] = {"containers": [container], "volumes": self.volumes}
        return {"initContainers": self.init_containers, **pod} if self.init_containers else pod


def _pod_parts(
    image: str,
    repository_volume: tuple[dict, dict, list[dict]],
    hf_token_secret: str,
    shm_mib: int,
    node_gpus: int,
    budget_s: int,
) -> PodParts:
    volume, mount, init_containers = repository_volume
    env: list[dict] = [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": hf_token_secret, "key": HF_TOKEN_KEY, "optional": True}},
        },
        {"name": "HF_HOME", "value": HF_HOME},
    ]
    volumes = [
        volume,
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(shm_mib)}},
        {"name": "hf-cache", "emptyDir": {}},
    ]
    mounts = [mount, {"name": "dshm", "mountPath": "/dev/shm"}, {"name": "hf-cache", "mountPath": HF_HOME}]
    resources = {"requests": {GPU_RESOURCE: node_gpus}, "limits": {GPU_RESOURCE: node_gpus}}
    return PodParts(image, env, volumes, mounts, resources, init_containers, budget_s // PROBE_PERIOD_S)


# ------------------------------------------------------------------------------------------------ manifests --
def _deployment(name: str, labels: dict, parts: PodParts) -> dict:
    """One pod running tritonserver."""
    container = {
        "name": "tritonserver",
        "image": parts.image,
        "command": _tritonserver_args(),
        "ports": _server_ports(),
        "env": parts.env,
        "resources": parts.resources,
        **_probes(parts.startup_periods),
        "volumeMounts": parts.mounts,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            # A rolling update would need a second set of GPUs while the old pod still holds its own.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": labels}, "spec": parts.pod(container)},
        },
    }


def _leader_worker_set(name: str, labels: dict, parts: PodParts, layout: NodeLayout) -> dict:
    """A leader pod that starts the Ray head, waits for every GPU of the group, and runs tritonserver; worker pods
    that join its Ray cluster."""
    world, node_gpus = layout.world, layout.node_gpus
    ray_env = [
        {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        # Ray workers unpickle the backend's classes: they must find Triton's vLLM backend modules.
        {"name": "PYTHONPATH", "value": TRITON_VLLM_BACKEND_DIR},
    ]
    ray_node = (
        f'--node-ip-address="$VLLM_HOST_IP" --num-gpus={node_gpus} '
        f"--object-store-memory={RAY_OBJECT_STORE_MIB * MiB} --disable-usage-stats"
    )
    wait = (
        "import ray; ray.init(address='auto', logging_level='ERROR'); print(int(ray.cluster_resources().get('GPU', 0)))"
    )
    leader_script = (
        f"ray start --head --port={RAY_PORT} {ray_node}\n"
        f'until [ "$(python3 -c "{wait}" 2>/dev/null)" -ge {world} ] 2>/dev/null; do\n'
        f'  echo "waiting for {world} GPUs in the Ray cluster"; sleep 5\n'
        "done\n"
        f"exec {' '.join(_tritonserver_args())}\n"
    )
    worker_script = (
        f'until ray health-check --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" >/dev/null 2>&1; do sleep 5; done\n'
        f'exec ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" {ray_node} --block\n'
    )
    leader = {
        "name": "tritonserver",
        "image": parts.image,
        "command": ["sh", "-c", leader_script],
        "ports": [*_server_ports(), {"name": "ray-gcs", "containerPort": RAY_PORT, "protocol": "TCP"}],
        "env": parts.env + ray_env,
        "resources": parts.resources,
        **_probes(parts.startup_periods),
        "volumeMounts": parts.mounts,
    }
    worker = {
        "name": "ray-worker",
        "image": parts.image,
        "command": ["sh", "-c", worker_script],
        "env": parts.env + ray_env,
        "resources": parts.resources,
        "volumeMounts": parts.mounts,
    }
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": layout.nodes,
                # One pod lost takes the engine down: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {**labels, "role": "leader"}}, "spec": parts.pod(leader)},
                "workerTemplate": {"metadata": {"labels": {**labels, "role": "worker"}}, "spec": parts.pod(worker)},
            },
        },
    }


# ------------------------------------------------------------------------------------------------- export --
def export_kubernetes(
    repository: str | Path,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    image: str | None = None,
    vllm_version: str | None = None,
    repository_from: str = "configmap",
    name: str | None = None,
    hf_token_secret: str = DEFAULT_HF_TOKEN_SECRET,
    read_mb_s: float = DEFAULT_READ_MB_S,
) -> KubernetesExport:
    """The manifests that serve ``repository``: a Deployment + Service, or a LeaderWorkerSet + Service when an
    engine needs more GPUs than ``gpus_per_node``; with a ConfigMap first when the repository comes from one."""
    from vllm_repo.repository import open_repository

    root = _check_options(repository, gpus_per_node, read_mb_s, hf_token_secret)
    source = Source.parse(repository_from)
    repo = open_repository(root.absolute())
    vllm_models = [m for m in repo.models if m.uses_vllm_backend and m.engine_args_data()]
    if not vllm_models:
        raise UsageError(
            f"{repository}: no model with a vLLM backend and a readable <version>/model.json",
            hint=f"`vllm-repo validate {repository}` says what is wrong",
        )
    name = _name_for(name, root.absolute())
    image, image_note = _choose_image(image, vllm_version, root.absolute())
    notes = [image_note]
    notes += [
        f"{m.name}: not a vLLM-backend model; served as its config.pbtxt says"
        for m in repo.models
        if m not in vllm_models
    ]
    layout = _node_layout(repository, vllm_models, gpus_per_node)
    notes += layout.notes
    loads = [_model_load(m, read_mb_s) for m in vllm_models]
    for model in vllm_models:
        inner = model.engine_settings().model
        if inner is not None and inner.startswith("/"):
            notes.append(f"{model.name}: model.json names the local path {inner}; the pods must have it there")
    budget_s, budget_notes = _startup_budget(loads, layout.multi_node)
    shm_mib = _shm_mib(len(vllm_models), layout.multi_node)

    labels = {"app.kubernetes.io/name": "triton-vllm", "app.kubernetes.io/instance": name}
    documents: list[tuple[dict, list[str]]] = []
    items: list[dict] = []
    if source.kind == "configmap":
        configmap, items = _configmap(name, root, labels)
        documents.append(
            (configmap, [f"The files of the model repository {root.name}, mounted at {REPOSITORY_MOUNT}."])
        )
    volume = _repository_volume(source, name, items)
    parts = _pod_parts(image, volume, hf_token_secret, shm_mib, layout.node_gpus, budget_s)
    title = f"Triton Inference Server with the vLLM backend for the model repository {root.name}."
    details = [
        *notes,
        *budget_notes,
        f"/dev/shm: {_quantity(shm_mib)} memory emptyDir; HF_TOKEN from the Secret {hf_token_secret} "
        f"(key {HF_TOKEN_KEY}, optional): kubectl create secret generic {hf_token_secret} "
        f"--from-literal={HF_TOKEN_KEY}=...",
    ]
    if not layout.multi_node:
        documents.append((_deployment(name, labels, parts), [title, *details]))
        documents.append((_service(name, labels, dict(labels)), [f"Triton's HTTP, gRPC and metrics ports of {name}."]))
        return KubernetesExport(name, False, image, documents, notes)
    spans = (
        f"{layout.largest}: TP x PP = {layout.world} GPUs on {layout.nodes} nodes of {layout.node_gpus} "
        "(LeaderWorkerSet, needs the LWS controller); the leader runs the Ray head and tritonserver, the workers join "
        "Ray; the image must have Ray"
    )
    documents.append((_leader_worker_set(name, labels, parts, layout), [title, spans, *details]))
    selector = {LWS_NAME_LABEL: name, "role": "leader"}
    documents.append((_service(name, labels, selector), [f"Triton's ports on the leader pod of {name}."]))
    return KubernetesExport(name, True, image, documents, notes)


def write_export(result: KubernetesExport, output: Path, *, force: bool = False) -> Path:
    """Write the manifests to OUTPUT/<name>.yaml; an existing file is replaced only with ``force``."""
    from vllm_repo.files import write_atomic

    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output}: not a directory")
    target = output / f"{result.name}.yaml"
    if target.exists() and not force:
        raise UsageError(f"{target} exists", hint="pass --force to replace it, or another --output")
    write_atomic(target, result.text)
    return target
