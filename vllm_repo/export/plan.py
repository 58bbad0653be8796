"""`export kubernetes`, the plan: what serving a model repository on Kubernetes takes, decided before a manifest is
written (kubernetes.py renders it).

A repository whose engines fit on one node is served by one pod per replica; one whose engine needs more GPUs than a
node has (tensor_parallel_size x pipeline_parallel_size > --gpus-per-node) spans nodes with vLLM's Ray executor
(NodeLayout). The image is the NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container whose vLLM is the repository's
release, plus vllm-repo's bundled backend, and the repository is validated against that vLLM. The startupProbe's
budget is the estimated load time (checkpoint bytes / a stated read bandwidth + engine start, with a margin).

What the user should fix before applying (a release other than the repository's, validate's warnings, a local path
the pods will not have) is a finding: printed as a warning, and an error with --strict.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity, display_path
from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.export.dockerfile import DOCKERFILE, ImageBuild
from vllm_repo.export.operator import Operator, OperatorOptions
from vllm_repo.export.pods import PROBE_PERIOD_S, RAY_OBJECT_STORE_MIB, REPOSITORY_MOUNT, Gateway

if TYPE_CHECKING:
    from vllm_repo.repository import ModelDirectory
    from vllm_repo.serve.container import ContainerChoice

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

DEFAULT_HF_TOKEN_SECRET = "hf-token"
DEFAULT_REPOSITORY_FROM = "configmap"

# /dev/shm: Triton's Python backend regions (they grow with the tensors of the requests in flight), plus per vLLM
# engine its multiprocessing message queues (160 + 240 MiB, rounded up), and at least launch --docker's 2 GiB.
SHM_BASE_MIB = 1024
SHM_PER_ENGINE_MIB = 512
SHM_MIN_MIB = 2048

# Names become pod names with suffixes (<name>-<group>-<worker>), which must stay within 63 characters.
MAX_NAME = 40
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


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


class ExportFindingsError(VllmRepoError):
    """--strict and the export found something to fix; the findings were printed as warnings."""


@dataclasses.dataclass
class KubernetesPlan:
    """What the manifests will say, decided: kubernetes.py renders it."""

    root: Path
    name: str  # the objects' name
    source: Source  # where the pods find the repository
    operator: Operator
    gateway: Gateway | None
    layout: NodeLayout
    models: list[ModelDirectory]  # the vLLM-backend models
    hf_token_secret: str
    image: str  # the image the pods run
    build: ImageBuild | None  # the Dockerfile of ``image``; None when the pods run the base image as is
    findings: list[Diagnostic]  # what to fix before applying: warnings
    notes: list[str]
    loads: list[ModelLoad]
    budget_s: int  # the startupProbe's budget
    budget_notes: list[str]  # what it is made of
    shm_mib: int  # /dev/shm
    pod_share: int | None  # the checkpoint bytes one pod reads, where they are known
    hub_checkpoints: int | None  # the bytes that come from the Hugging Face Hub into the cache


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


# ------------------------------------------------------------------------------------------------- findings --
# The export's own findings, each a warning (an error with --strict); validate's keep their VR codes.
OTHER_RELEASE = "VE101"  # the container carries another vLLM than the repository's release
CONTAINER_BACKEND = "VE102"  # the bundled backend cannot drive the container's vLLM: its own backend serves
LOCAL_PATH = "VE103"  # model.json names a local path the pods do not have


def _container_findings(choice: ContainerChoice, root: Path) -> list[Diagnostic]:
    found = [(OTHER_RELEASE, choice.other_release()), (CONTAINER_BACKEND, choice.own_backend())]
    return [
        Diagnostic(code=code, severity=Severity.WARNING, file=display_path(root), message=message)
        for code, message in found
        if message is not None
    ]


def _validate(root: Path, vllm: str) -> list[Diagnostic]:
    """validate's warnings against the container's vLLM; its errors stop the export."""
    from vllm_repo.validate import validate_paths

    result = validate_paths([root], vllm_version=vllm, vllm_version_origin="the container's vLLM")
    if result.has_errors:
        errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
        raise ExportFindingsError(
            f"{root} does not pass validate against vLLM {vllm}, the container's release "
            f"({len(errors)} error{'s' * (len(errors) != 1)}); nothing exported",
            hint=f"fix the findings above (`vllm-repo validate --vllm-version {vllm} {root}` shows them too)",
            diagnostics=result.diagnostics,
        )
    # VR310 (a local path missing here) is about this machine; what counts is whether the pods have the path, which
    # _local_path_findings says.
    return [d for d in result.diagnostics if d.severity is Severity.WARNING and d.code != "VR310"]


def _local_path_findings(vllm_models: list[ModelDirectory], mounts: list[str]) -> list[Diagnostic]:
    """Local paths model.json names that no --volume (or the repository) puts in the pods."""
    out = []
    for model in vllm_models:
        data = model.engine_args_data() or {}
        doc = model.served_engine_args()
        for key in ("model", "tokenizer"):
            value = data.get(key)
            if not isinstance(value, str) or not value.startswith("/"):
                continue
            if any(value == m or value.startswith(m.rstrip("/") + "/") for m in [*mounts, REPOSITORY_MOUNT]):
                continue
            position = doc.position_of(key) if doc is not None else None
            out.append(
                Diagnostic(
                    code=LOCAL_PATH,
                    severity=Severity.WARNING,
                    file=display_path(doc.path) if doc is not None else model.name,
                    line=position.line if position else None,
                    column=position.column if position else None,
                    message=f'{model.name}: model.json "{key}" is the local path {value}, which the pods do not have',
                    hint=f"mount a claim that holds it with --volume CLAIM[/PATH]:{value}",
                )
            )
    return out


# --------------------------------------------------------------------------------------------------- plan --
def plan_kubernetes(
    repository: str | Path,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    image: str | None = None,
    base_image: str | None = None,
    vllm_version: str | None = None,
    repository_from: str = DEFAULT_REPOSITORY_FROM,
    name: str | None = None,
    hf_token_secret: str = DEFAULT_HF_TOKEN_SECRET,
    read_mb_s: float = DEFAULT_READ_MB_S,
    openai_port: int | None = None,
    api_key_secret: str | None = None,
    operator: OperatorOptions | None = None,
) -> KubernetesPlan:
    """What serving ``repository`` on Kubernetes takes, decided before any manifest is written: the layout on nodes,
    the image, the models' load times and the startup budget, the pods' sizes, and the findings to fix before
    applying. Raises UsageError for options or a repository that cannot be served, ExportFindingsError for one that
    does not pass validate against the container's vLLM."""
    from vllm_repo.repository import open_repository
    from vllm_repo.serve.container import choose_container

    root = _check_options(repository, gpus_per_node, read_mb_s, hf_token_secret)
    source = Source.parse(repository_from)
    ops = Operator.parse(operator or OperatorOptions())
    gateway = _gateway(openai_port, api_key_secret)
    repo = open_repository(root.absolute())
    vllm_models = [m for m in repo.models if m.uses_vllm_backend and m.engine_args_data()]
    if not vllm_models:
        raise UsageError(
            f"{repository}: no model with a vLLM backend and a readable <version>/model.json",
            hint=f"`vllm-repo validate {repository}` says what is wrong",
        )
    name = _name_for(name, root.absolute())
    layout = _node_layout(repository, vllm_models, gpus_per_node)

    # The container, and the release the repository is checked against: the one in it (as launch --docker).
    choice = choose_container(vllm_version, root)
    findings = _container_findings(choice, root)
    findings += _validate(root.absolute(), choice.vllm)
    findings += _local_path_findings(vllm_models, [v.mount for v in ops.volumes])
    pod_image = _pod_image(choice, image, base_image, gateway, ray=layout.multi_node)
    notes = pod_image.notes
    notes += [
        f"{m.name}: not a vLLM-backend model; served as its config.pbtxt says"
        for m in repo.models
        if m not in vllm_models
    ]
    notes += layout.notes
    loads = [_model_load(m, read_mb_s) for m in vllm_models]
    budget_s, budget_notes = _startup_budget(loads, layout.multi_node)
    sizes = [load.checkpoint_bytes for load in loads]
    checkpoints = None if None in sizes else sum(s or 0 for s in sizes)
    # The cache holds what comes from the Hub; a local path's weights come from a --volume claim.
    hub = [load.checkpoint_bytes for load, m in zip(loads, vllm_models, strict=True) if _from_hub(m)]

    return KubernetesPlan(
        root=root,
        name=name,
        source=source,
        operator=ops,
        gateway=gateway,
        layout=layout,
        models=vllm_models,
        hf_token_secret=hf_token_secret,
        image=pod_image.image,
        build=pod_image.build,
        findings=findings,
        notes=notes,
        loads=loads,
        budget_s=budget_s,
        budget_notes=budget_notes,
        shm_mib=_shm_mib(len(vllm_models), layout.multi_node),
        pod_share=None if checkpoints is None else math.ceil(checkpoints / layout.nodes),
        hub_checkpoints=None if None in hub else sum(s or 0 for s in hub),
    )


@dataclasses.dataclass
class _PodImage:
    image: str  # what the pods run
    build: ImageBuild | None  # its Dockerfile; None when the pods run the base image as is
    notes: list[str]  # where it comes from


def _pod_image(
    choice: ContainerChoice, image: str | None, base_image: str | None, gateway: Gateway | None, *, ray: bool
) -> _PodImage:
    """The container with the bundled backend added where it can drive the container's vLLM; else the container as
    is (UsageError where the gateway is asked for: it needs the bundled backend)."""
    from vllm_repo.export.dockerfile import default_image, dockerfile, vllm_repo_version

    base = base_image or choice.image
    notes = [choice.note if base_image is None else f"base image {base_image} (--base-image); {choice.note}"]
    if choice.bundled_backend:
        version = vllm_repo_version()
        build = dockerfile(base, image or default_image(choice.match.release.release, version), version, ray=ray)
        notes.append(
            f"image {build.image}: {base} with vllm-repo {version}'s bundled backend ({DOCKERFILE} beside "
            "these manifests)"
        )
        return _PodImage(build.image, build, notes)
    if gateway is not None:
        raise UsageError(
            f"--openai-port: the gateway needs the bundled backend, and vLLM {choice.vllm} in {base} is older "
            "than it supports",
            hint="pick a newer release with --vllm-version (0.20 or newer), or leave out --openai-port",
        )
    pod_image = image or base
    notes.append(f"image {pod_image}: the container's own vLLM backend serves")
    return _PodImage(pod_image, None, notes)


def _from_hub(model: ModelDirectory) -> bool:
    """Whether the model's weights come from the Hugging Face Hub (into the cache), not from a path in the pod."""
    value = (model.engine_args_data() or {}).get("model")
    return isinstance(value, str) and not value.startswith(("/", "./", "../", "~"))


def _gateway(openai_port: int | None, api_key_secret: str | None) -> Gateway | None:
    from vllm_repo.export.pods import GRPC_PORT, HTTP_PORT, METRICS_PORT, RAY_PORT

    if openai_port is None:
        if api_key_secret is not None:
            raise UsageError("--api-key-secret goes with --openai-port: Triton's own endpoints take no API key")
        return None
    if not 1 <= openai_port <= 65535 or openai_port in (HTTP_PORT, GRPC_PORT, METRICS_PORT, RAY_PORT):
        raise UsageError(
            f"--openai-port {openai_port}: not a free port of the pod",
            hint=f"Triton has {HTTP_PORT}, {GRPC_PORT} and {METRICS_PORT} (and Ray {RAY_PORT}); e.g. 9000",
        )
    if api_key_secret is not None and not _DNS_1035.match(api_key_secret.replace(".", "-")):
        raise UsageError(f"--api-key-secret {api_key_secret!r}: not a Kubernetes Secret name")
    return Gateway(openai_port, api_key_secret)
