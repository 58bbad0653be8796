"""export kubernetes: the manifests for one node (Deployment + Service) and across nodes (LeaderWorkerSet + Service),
validated offline against Kubernetes' own JSON schemas and the LWS CRD's schema, and compared with golden files
(tests/support/export_repos.py says how to regenerate them)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import huggingface_hub.constants
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.export_repos import (
    BIG_MODEL,
    OLD_VLLM,
    SMALL_CONFIG,
    SMALL_MODEL,
    VLLM,
    big_engine_args,
    by_kind,
    cache_model,
    check_golden,
    make_repository,
    server,
    validate_all,
    validate_core,
    validate_lws,
)
from vllm_repo.errors import UsageError
from vllm_repo.export import export_kubernetes, write_export
from vllm_repo.export.pods import LWS_NAME_LABEL
from vllm_repo.releases.ngc import container_for_vllm


# --------------------------------------------------------------------------------------------------- tests --
def test_small_repository_is_a_deployment_and_service_that_validate(small_repo):
    result = export_kubernetes(small_repo, vllm_version=VLLM)
    assert not result.multi_node
    # The Hugging Face cache is a claim of its own: a restart finds the weights it downloaded.
    assert [o["kind"] for o in result.objects] == ["ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"]
    assert list(yaml.safe_load_all(result.text)) == result.objects  # the writer's YAML reads back as the objects
    validate_all(result.objects)
    check_golden("small.yaml", result.text)


def test_multi_node_repository_is_a_leaderworkerset_that_validates(big_repo):
    result = export_kubernetes(big_repo, vllm_version=VLLM, gpus_per_node=8, repository_from="pvc:models/big-repo")
    assert result.multi_node
    assert [o["kind"] for o in result.objects] == ["LeaderWorkerSet", "Service"]
    assert list(yaml.safe_load_all(result.text)) == result.objects
    validate_all(result.objects)
    check_golden("multi-node.yaml", result.text)


def test_the_validators_do_reject_a_wrong_field(small_repo, big_repo):
    """The schemas are really applied: a misspelt field fails each of them."""
    deployment = by_kind(export_kubernetes(small_repo, vllm_version=VLLM).objects)["Deployment"]
    broken = copy.deepcopy(deployment)
    container = server(broken["spec"]["template"]["spec"])
    container["startupprobe"] = container.pop("startupProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(broken)
    lws = by_kind(export_kubernetes(big_repo, vllm_version=VLLM).objects)["LeaderWorkerSet"]
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RestartGroup"
    with pytest.raises(jsonschema.ValidationError):
        validate_lws(broken)
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["size"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        validate_lws(broken)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2), (8, 1)])
def test_gpus_come_from_tp_times_pp_on_one_node(tmp_path, hf_cache, tp, pp):
    repo = make_repository(
        tmp_path / "r", {"m": {"model": SMALL_MODEL, "tensor_parallel_size": tp, "pipeline_parallel_size": pp}}
    )
    result = export_kubernetes(repo, vllm_version=VLLM, gpus_per_node=8)
    resources = server(by_kind(result.objects)["Deployment"]["spec"]["template"]["spec"])["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == tp * pp


def test_an_engine_larger_than_a_node_spans_nodes_with_ray(big_repo):
    result = export_kubernetes(big_repo, vllm_version=VLLM, gpus_per_node=4)
    template = by_kind(result.objects)["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 4  # 16 GPUs on nodes of 4
    leader, worker = template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]
    for pod in (leader, worker):
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    leader_script = leader["containers"][0]["command"][-1]
    assert "ray start --head" in leader_script and "-ge 16" in leader_script  # waits for all 16 GPUs
    assert leader_script.rstrip().splitlines()[-1].startswith("exec tritonserver --model-repository=/models")
    worker_script = worker["containers"][0]["command"][-1]
    assert '--address="$LWS_LEADER_ADDRESS:6379"' in worker_script and "--block" in worker_script
    assert "tritonserver" not in worker_script
    # The Service reaches the leader only: its selector matches the leader's labels (plus the one LWS adds).
    service = by_kind(result.objects)["Service"]
    leader_labels = {**template["leaderTemplate"]["metadata"]["labels"], LWS_NAME_LABEL: result.name}
    worker_labels = {**template["workerTemplate"]["metadata"]["labels"], LWS_NAME_LABEL: result.name}
    selector = service["spec"]["selector"].items()
    assert selector <= leader_labels.items() and not selector <= worker_labels.items()


def test_an_uneven_split_gives_every_node_an_equal_share(tmp_path, hf_cache):
    repo = make_repository(
        tmp_path / "r",
        {
            "m": {
                "model": BIG_MODEL,
                "tensor_parallel_size": 4,
                "pipeline_parallel_size": 3,
                "distributed_executor_backend": "ray",
            }
        },
    )
    template = by_kind(export_kubernetes(repo, vllm_version=VLLM, gpus_per_node=8).objects)["LeaderWorkerSet"]
    lwt = template["spec"]["leaderWorkerTemplate"]
    per_pod = lwt["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert lwt["size"] * per_pod == 12 and per_pod <= 8


@pytest.mark.parametrize("backend", [None, "mp"])
def test_spanning_nodes_without_the_ray_executor_is_refused(tmp_path, hf_cache, backend):
    args = big_engine_args() if backend is None else big_engine_args(distributed_executor_backend=backend)
    repo = make_repository(tmp_path / "r", {"m": args})
    with pytest.raises(UsageError) as err:
        export_kubernetes(repo, vllm_version=VLLM, gpus_per_node=8)
    assert "distributed_executor_backend" in err.value.message and '"ray"' in err.value.hint
    assert "model.json" in err.value.message


def test_a_spanning_model_beside_another_model_is_refused(tmp_path, hf_cache):
    repo = make_repository(
        tmp_path / "r",
        {"big": big_engine_args(distributed_executor_backend="ray"), "small": {"model": SMALL_MODEL}},
    )
    with pytest.raises(UsageError, match="must hold that one vLLM model"):
        export_kubernetes(repo, vllm_version=VLLM)


def test_startup_budget_follows_the_checkpoint_size_and_read_bandwidth(tmp_path, hf_cache):
    cache_model(hf_cache, "org/light", SMALL_CONFIG, 10_000_000_000)
    cache_model(hf_cache, "org/heavy", SMALL_CONFIG, 100_000_000_000)

    def threshold(model: str, **options) -> int:
        repo = tmp_path / f"r-{model.split('/')[1]}-{sorted(options.items())}"
        if not repo.exists():
            make_repository(repo, {"m": {"model": model}})
        deployment = by_kind(export_kubernetes(repo, vllm_version=VLLM, **options).objects)["Deployment"]
        probe = server(deployment["spec"]["template"]["spec"])["startupProbe"]
        return probe["failureThreshold"] * probe["periodSeconds"]

    light, heavy = threshold("org/light"), threshold("org/heavy")
    assert heavy > light
    # Ten times the bytes read ten times as fast: the same budget as the light one (the engine start stays).
    fast = threshold("org/heavy", read_mb_s=5000)
    assert fast < heavy
    assert fast == pytest.approx(light, abs=20)


def test_an_unknown_checkpoint_gets_the_stated_default_budget(tmp_path, hf_cache):
    cache_model(hf_cache, "org/no-index", SMALL_CONFIG, None)
    known = make_repository(tmp_path / "a", {"m": {"model": "org/no-index"}})
    unknown = make_repository(tmp_path / "b", {"m": {"model": "org/not-cached"}})
    from_params = export_kubernetes(known, vllm_version=VLLM)
    assert "parameter count from config.json" in from_params.text
    text = export_kubernetes(unknown, vllm_version=VLLM).text
    assert "checkpoint size unknown offline" in text
    header = [line for line in text.splitlines() if line.startswith("#   m:")]
    assert header and "s assumed" in header[0]


def test_the_hf_token_is_a_secret_reference_never_the_token(small_repo, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    result = export_kubernetes(small_repo, vllm_version=VLLM, hf_token_secret="my-hf")
    assert "hf_secretvalue123" not in result.text
    env = {e["name"]: e for e in server(by_kind(result.objects)["Deployment"]["spec"]["template"]["spec"])["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "my-hf"
    assert "value" not in env["HF_TOKEN"]


def test_the_image_is_built_on_the_container_of_the_vllm_release(small_repo):
    result = export_kubernetes(small_repo, vllm_version=VLLM)
    assert result.build is not None
    assert result.build.base == container_for_vllm(VLLM).release.image
    assert result.build.text.splitlines()[result.build.text.splitlines().index(f"FROM {result.build.base}")]
    assert result.image == result.build.image and result.image in result.text
    given = export_kubernetes(small_repo, image="registry.example/triton:custom", vllm_version=VLLM)
    assert given.image == "registry.example/triton:custom" and given.build is not None
    assert given.build.image == given.image
    pods = [server(by_kind(given.objects)["Deployment"]["spec"]["template"]["spec"])]
    assert [c["image"] for c in pods] == [given.image]
    based = export_kubernetes(small_repo, base_image="registry.example/ngc:mirror", vllm_version=VLLM)
    assert based.build is not None and based.build.base == "registry.example/ngc:mirror"


def test_a_container_too_old_for_the_bundled_backend_serves_with_its_own_and_says_so(small_repo):
    result = export_kubernetes(small_repo, vllm_version=OLD_VLLM)
    assert result.build is None
    assert result.image == container_for_vllm(OLD_VLLM).release.image
    (finding,) = [f for f in result.findings if "bundled backend needs vLLM" in f.message]
    assert finding.code == "VE102" and finding.severity.value == "warning"
    with pytest.raises(UsageError, match="--openai-port"):
        export_kubernetes(small_repo, vllm_version=OLD_VLLM, openai_port=9000)


def test_probes_and_ports(small_repo):
    container = server(
        by_kind(export_kubernetes(small_repo, vllm_version=VLLM).objects)["Deployment"]["spec"]["template"]["spec"]
    )
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert sorted(ports.values()) == [8000, 8001, 8002]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == 8000
    assert f"--http-port={ports['http']}" in container["command"]


def test_the_configmap_puts_every_file_back_where_it_was(small_repo):
    (small_repo / "qwen" / "1" / "multi_lora.json").write_text('{"a": "/adapters/a"}\n')
    (small_repo / "qwen" / "1" / "blob.bin").write_bytes(b"\xff\x00\xfe")
    objects = by_kind(export_kubernetes(small_repo, vllm_version=VLLM).objects)
    configmap, pod = objects["ConfigMap"], objects["Deployment"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    import base64

    rebuilt = {}
    for item in volume["configMap"]["items"]:
        key = item["key"]
        rebuilt[item["path"]] = (
            configmap["data"][key].encode()
            if key in configmap.get("data", {})
            else base64.b64decode(configmap["binaryData"][key])
        )
    on_disk = {p.relative_to(small_repo).as_posix(): p.read_bytes() for p in small_repo.rglob("*") if p.is_file()}
    assert rebuilt == on_disk
    validate_core(configmap)


def test_a_repository_too_big_for_a_configmap_asks_for_a_claim(small_repo):
    (small_repo / "qwen" / "1" / "weights.bin").write_bytes(b"\0" * 1_100_000)
    with pytest.raises(UsageError) as err:
        export_kubernetes(small_repo, vllm_version=VLLM)
    assert "pvc:" in err.value.hint
    objects = export_kubernetes(small_repo, vllm_version=VLLM, repository_from="pvc:models").objects
    assert "ConfigMap" not in by_kind(objects) and "Deployment" in by_kind(objects)


def test_an_image_source_copies_the_repository_in_an_init_container(small_repo):
    objects = export_kubernetes(small_repo, vllm_version=VLLM, repository_from="image:registry.example/repo:1").objects
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "Deployment", "Service"]
    pod = by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == "registry.example/repo:1"
    shared = {m["name"] for m in init["volumeMounts"]} & {m["name"] for m in server(pod)["volumeMounts"]}
    assert shared and all("emptyDir" in v for v in pod["volumes"] if v["name"] in shared)
    validate_all(objects)


def test_shm_is_a_memory_emptydir_that_grows_with_the_engines(tmp_path, hf_cache):
    def shm(models: dict) -> str:
        repo = make_repository(tmp_path / f"r{len(models)}", models)
        pod = by_kind(export_kubernetes(repo, vllm_version=VLLM).objects)["Deployment"]["spec"]["template"]["spec"]
        mount = next(m for m in server(pod)["volumeMounts"] if m["mountPath"] == "/dev/shm")
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["emptyDir"]["medium"] == "Memory"
        return volume["emptyDir"]["sizeLimit"]

    def mib(quantity: str) -> int:
        return int(quantity[:-2]) * (1024 if quantity.endswith("Gi") else 1)

    one = shm({"a": {"model": SMALL_MODEL}})
    # Four engines on one GPU, each with a share of its memory that validate accepts.
    four = shm({f"m{i}": {"model": SMALL_MODEL, "gpu_memory_utilization": 0.2} for i in range(4)})
    assert mib(one) >= 2048 and mib(four) > mib(one)


def test_bad_options_are_usage_errors(small_repo):
    for options in ({"repository_from": "nfs:x"}, {"name": "Bad_Name"}, {"gpus_per_node": 0}, {"read_mb_s": 0}):
        with pytest.raises(UsageError):
            export_kubernetes(small_repo, vllm_version=VLLM, **options)


def test_output_is_written_once_and_replaced_only_with_force(small_repo, tmp_path):
    result = export_kubernetes(small_repo, vllm_version=VLLM)
    assert result.build is not None
    out = tmp_path / "out"
    manifests, dockerfile = write_export(result, out)
    assert manifests == out / "small-repo.yaml" and manifests.read_text() == result.text
    assert dockerfile == out / "Dockerfile" and dockerfile.read_text() == result.build.text
    with pytest.raises(UsageError, match="exists"):
        write_export(result, out)
    manifests.write_text("changed")
    dockerfile.unlink()
    with pytest.raises(UsageError, match="exists"):
        write_export(result, out)  # one file of the two exists: neither is written
    assert manifests.read_text() == "changed" and not dockerfile.exists()
    write_export(result, out, force=True)
    assert manifests.read_text() == result.text and dockerfile.read_text() == result.build.text


def test_the_command_prints_or_writes_and_refuses_cleanly(small_repo, tmp_path, monkeypatch, vllm_repo_version):
    from vllm_repo.export import dockerfile

    monkeypatch.setattr(dockerfile, "vllm_repo_version", vllm_repo_version)  # the command's own
    env = {**os.environ, "HF_HUB_CACHE": huggingface_hub.constants.HF_HUB_CACHE, "HF_HUB_OFFLINE": "1"}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "vllm_repo", "export", "kubernetes", str(small_repo), "--vllm-version", VLLM, *args],
            capture_output=True,
            text=True,
            env=env,
        )

    printed = run()
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == export_kubernetes(small_repo, vllm_version=VLLM).text
    out = tmp_path / "out"
    assert run("--output", str(out)).returncode == 0
    again = run("--output", str(out))
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
    assert run("--output", str(out), "--force").returncode == 0
