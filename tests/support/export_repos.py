"""What the export tests share: repositories whose models sit in a test Hugging Face cache, and the validators of
the manifests (Kubernetes' own JSON schemas through kubernetes-validate, the LWS CRD's schema).

Regenerate the golden files with VLLM_REPO_UPDATE_GOLDEN=1 (and read the diff before committing it)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parents[1] / "export"
GOLDEN = HERE / "golden"
CONFIGS = HERE.parent / "estimate" / "data" / "configs"
LWS_CRD = HERE / "data" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
# The Kubernetes releases the core objects are validated against: the oldest one the LWS controller's current
# releases support well, and the newest kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# Pins the NGC image (26.08, whose vLLM the bundled backend drives), so the golden files do not depend on the vLLM
# installed here.
VLLM = "0.27.1"
# A release whose container's vLLM is older than the bundled backend supports.
OLD_VLLM = "0.11.0"

SMALL_MODEL, SMALL_CONFIG = "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"
BIG_MODEL, BIG_CONFIG = "Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"


def cache_model(cache: Path, repo_id: str, config_name: str, total_size: int | None) -> None:
    """What `huggingface-cli download REPO config.json model.safetensors.index.json` leaves in the cache."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    snap = root / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    (snap / "config.json").write_text((CONFIGS / f"{config_name}.json").read_text())
    if total_size is not None:
        index = {"metadata": {"total_size": total_size}, "weight_map": {"lm_head.weight": "model-00001.safetensors"}}
        (snap / "model.safetensors.index.json").write_text(json.dumps(index))


def make_repository(root: Path, models: dict[str, dict]) -> Path:
    for name, engine_args in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [{ kind: KIND_MODEL }]\n')
        (root / name / "1" / "model.json").write_text(json.dumps(engine_args, indent=2) + "\n")
    return root


def big_engine_args(**extra) -> dict:
    return {"model": BIG_MODEL, "tensor_parallel_size": 8, "pipeline_parallel_size": 2, **extra}


@functools.cache
def lws_schema() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(LWS_CRD.read_text(), Loader=loader)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def validate_lws(obj: dict) -> None:
    jsonschema.validate(obj, lws_schema(), cls=jsonschema.Draft4Validator)


def validate_core(obj: dict) -> None:
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def as_pod_template(template: dict) -> dict:
    """An LWS pod template as a core PodTemplate, so the pod spec meets Kubernetes' own schema too."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}


def validate_all(objects: list[dict]) -> None:
    for obj in objects:
        if obj["kind"] == "LeaderWorkerSet":
            validate_lws(obj)
            for role in ("leaderTemplate", "workerTemplate"):
                validate_core(as_pod_template(obj["spec"]["leaderWorkerTemplate"][role]))
        else:
            validate_core(obj)


def by_kind(objects: list[dict]) -> dict[str, dict]:
    return {obj["kind"]: obj for obj in objects}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("VLLM_REPO_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with VLLM_REPO_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"the output changed from {path}; VLLM_REPO_UPDATE_GOLDEN=1 rewrites it"


def server(pod_spec: dict) -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == "tritonserver")
