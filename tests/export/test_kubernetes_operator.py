"""export kubernetes's operator options: every one on and every one off validate (Kubernetes 1.30 and the newest
schema, strict; the LWS CRD), for the Deployment and the LeaderWorkerSet, and each does what it says."""

from __future__ import annotations

import json

import pytest

from tests.support.export_repos import (
    SMALL_CONFIG,
    SMALL_MODEL,
    VLLM,
    by_kind,
    cache_model,
    check_golden,
    make_repository,
    server,
    validate_all,
)
from vllm_repo.errors import UsageError
from vllm_repo.export import export_kubernetes
from vllm_repo.export.operator import OperatorOptions


def all_on(tmp_path) -> dict:
    affinity = tmp_path / "affinity.json"
    affinity.write_text(
        json.dumps(
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
                                ]
                            }
                        ]
                    }
                }
            }
        )
    )
    options = OperatorOptions(
        cpu="12",
        memory="96Gi",
        hf_cache="new:300Gi",
        storage_class="fast-rwx",
        volumes=("weights/qwen:/data/qwen", "adapters:/data/adapters"),
        node_selector=("cloud.example/pool=gpu",),
        tolerations=("dedicated=llm:NoSchedule", "spot"),
        affinity=affinity,
        run_as_user=0,
        grace_period_s=300,
        max_replicas=4,
        waiting_target=8,
    )
    return {
        "operator": options,
        "openai_port": 9000,
        "api_key_secret": "openai-key",
        "image": "registry.example/triton-vllm:1",
        "hf_token_secret": "my-hf",
        "name": "served",
    }


def pods(objects: list[dict]) -> list[dict]:
    """Every pod spec of the objects."""
    kinds = by_kind(objects)
    if "Deployment" in kinds:
        return [kinds["Deployment"]["spec"]["template"]["spec"]]
    lwt = kinds["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]


@pytest.mark.parametrize("repo_fixture", ["small_repo", "big_repo"])
@pytest.mark.parametrize("options", ["off", "on", "on-existing-claim", "on-emptydir"])
def test_every_option_on_and_off_validates(request, tmp_path, repo_fixture, options):
    repo = request.getfixturevalue(repo_fixture)
    kwargs: dict = {}
    if options != "off":
        hf_cache = {"on": "new:300Gi", "on-existing-claim": "pvc:hf-cache", "on-emptydir": "emptydir"}[options]
        kwargs = all_on(tmp_path)
        kwargs["operator"] = OperatorOptions(**{**kwargs["operator"].__dict__, "hf_cache": hf_cache})
    result = export_kubernetes(repo, vllm_version=VLLM, repository_from="pvc:models/repo", **kwargs)
    validate_all(result.objects)
    kinds = [o["kind"] for o in result.objects]
    assert ("HorizontalPodAutoscaler" in kinds) == (options != "off")
    if options == "on" and repo_fixture == "small_repo":
        check_golden("small-options.yaml", result.text)
    if options == "on" and repo_fixture == "big_repo":
        check_golden("multi-node-options.yaml", result.text)


def test_the_options_reach_every_pod(big_repo, tmp_path):
    result = export_kubernetes(big_repo, vllm_version=VLLM, **all_on(tmp_path))
    for pod in pods(result.objects):
        assert pod["nodeSelector"] == {"cloud.example/pool": "gpu"}
        assert {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"} in pod["tolerations"]
        assert {"key": "spot", "operator": "Exists"} in pod["tolerations"]
        assert pod["affinity"]["nodeAffinity"]
        assert pod["terminationGracePeriodSeconds"] == 300
        assert "runAsNonRoot" not in pod["securityContext"]  # --run-as-user 0
        container = pod["containers"][0]
        assert container["resources"]["requests"]["cpu"] == "12"
        assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"] == "96Gi"
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts["/data/qwen"]["subPath"] == "qwen" and mounts["/data/qwen"]["readOnly"]
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        }
        assert claims[mounts["/data/qwen"]["name"]] == "weights"
        assert claims[mounts["/data/adapters"]["name"]] == "adapters"
    hpa = by_kind(result.objects)["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "served",
    }
    assert hpa["spec"]["maxReplicas"] == 4
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    assert metric["pods"]["target"]["averageValue"] == "8"
    assert "Prometheus Adapter" in result.text


def test_defaults_are_non_root_with_a_grace_period_and_a_prestop(small_repo):
    result = export_kubernetes(small_repo, vllm_version=VLLM, openai_port=9000)
    (pod,) = pods(result.objects)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert pod["securityContext"]["fsGroup"] == 1000  # the cache claim is writable by the user
    grace = pod["terminationGracePeriodSeconds"]
    for container in pod["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        (sleep, seconds) = container["lifecycle"]["preStop"]["exec"]["command"]
        assert sleep == "sleep" and 0 < int(seconds) < grace
    command = server(pod)["command"]
    (exit_timeout,) = [int(a.split("=")[1]) for a in command if a.startswith("--exit-timeout-secs=")]
    preStop = int(server(pod)["lifecycle"]["preStop"]["exec"]["command"][1])
    # Triton's wait for requests in flight ends, with time for vLLM to stop, before Kubernetes kills the pod.
    assert preStop + exit_timeout < grace
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_memory_and_the_cache_claim_grow_with_the_checkpoint(tmp_path, hf_cache):
    cache_model(hf_cache, "org/light", SMALL_CONFIG, 10_000_000_000)
    cache_model(hf_cache, "org/heavy", SMALL_CONFIG, 100_000_000_000)

    def export(model: str):
        repo = make_repository(tmp_path / model.split("/")[1], {"m": {"model": model}})
        objects = by_kind(export_kubernetes(repo, vllm_version=VLLM).objects)
        container = server(objects["Deployment"]["spec"]["template"]["spec"])
        claim = objects["PersistentVolumeClaim"]["spec"]["resources"]["requests"]["storage"]
        return container["resources"], gib(claim), container

    def gib(quantity: str) -> float:
        return int(quantity[:-2]) / (1 if quantity.endswith("Gi") else 1024)

    light, light_claim, _ = export("org/light")
    heavy, heavy_claim, _ = export("org/heavy")
    # The processes and /dev/shm are the same; the limit has room for the weights the pod reads.
    assert light["requests"]["memory"] == heavy["requests"]["memory"]
    assert gib(heavy["limits"]["memory"]) - gib(light["limits"]["memory"]) >= 90e9 / 2**30 * 0.9
    assert gib(light["limits"]["memory"]) >= gib(light["requests"]["memory"]) + 10e9 / 2**30
    assert heavy_claim >= 100e9 / 2**30 and light_claim >= 10e9 / 2**30
    assert "limits" in light and "cpu" not in light["limits"]  # CPU is requested, never limited


def test_memory_counts_the_shm_volume(small_repo):
    pod = pods(export_kubernetes(small_repo, vllm_version=VLLM).objects)[0]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    request = server(pod)["resources"]["requests"]["memory"]
    assert int(request[:-2]) > int(shm[:-2]) and request.endswith("Gi") and shm.endswith("Gi")


def test_an_autoscaled_deployment_shares_its_cache_claim(small_repo):
    one = by_kind(export_kubernetes(small_repo, vllm_version=VLLM).objects)
    assert one["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    scaled = by_kind(export_kubernetes(small_repo, vllm_version=VLLM, operator=OperatorOptions(max_replicas=3)).objects)
    assert scaled["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]
    target = scaled["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", scaled["Deployment"]["metadata"]["name"])


def test_a_leaderworkerset_gets_a_cache_claim_per_pod(big_repo):
    lws = by_kind(export_kubernetes(big_repo, vllm_version=VLLM).objects)["LeaderWorkerSet"]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    (template,) = lwt["volumeClaimTemplates"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        assert template["metadata"]["name"] in {m["name"] for m in spec["containers"][0]["volumeMounts"]}
        assert template["metadata"]["name"] not in {v["name"] for v in spec["volumes"]}


def test_the_gateway_runs_beside_triton_and_shares_its_stream_socket(small_repo):
    result = export_kubernetes(small_repo, vllm_version=VLLM, openai_port=9000, api_key_secret="openai-key")
    objects = by_kind(result.objects)
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    triton, gateway = pod["containers"]
    assert gateway["image"] == triton["image"] == result.image
    command = gateway["command"]
    assert command[1] == "openai" and command[command.index("--triton-url") + 1] == "http://127.0.0.1:8000"
    assert command[command.index("--port") + 1] == "9000"
    env = {e["name"]: e for e in gateway["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "openai-key"
    # The gateway's socket directory (its TMPDIR) is a volume both containers mount, at the same path.
    tmpdir = env["TMPDIR"]["value"]
    for container in (triton, gateway):
        assert any(m["mountPath"] == tmpdir for m in container["volumeMounts"])
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/health", "port": "openai"}
    ports = {p["name"]: p["port"] for p in objects["Service"]["spec"]["ports"]}
    assert ports["openai"] == 9000


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"operator": OperatorOptions(cpu="four")}, "--cpu"),
        ({"operator": OperatorOptions(memory="lots")}, "--memory"),
        ({"operator": OperatorOptions(hf_cache="nfs:x")}, "--hf-cache"),
        ({"operator": OperatorOptions(volumes=("weights",))}, "--volume"),
        ({"operator": OperatorOptions(volumes=("a:/x", "b:/x"))}, "same mount path"),
        ({"operator": OperatorOptions(node_selector=("gpu",))}, "--node-selector"),
        ({"operator": OperatorOptions(tolerations=("a:Sometimes",))}, "--toleration"),
        ({"operator": OperatorOptions(grace_period_s=5)}, "--grace-period"),
        ({"operator": OperatorOptions(max_replicas=1)}, "--max-replicas"),
        ({"operator": OperatorOptions(run_as_user=-1)}, "--run-as-user"),
        ({"openai_port": 8000}, "--openai-port"),
        ({"api_key_secret": "k"}, "--api-key-secret goes with --openai-port"),
    ],
)
def test_bad_operator_options_are_usage_errors(small_repo, kwargs, says):
    with pytest.raises(UsageError, match=says.replace("-", r"\-")):
        export_kubernetes(small_repo, vllm_version=VLLM, **kwargs)


def test_an_affinity_file_that_is_not_an_affinity_names_the_file_and_line(small_repo, tmp_path):
    bad = tmp_path / "affinity.json"
    bad.write_text('{\n  "nodeAffinity": {,\n}')
    with pytest.raises(UsageError, match=f"{bad}:2"):
        export_kubernetes(small_repo, vllm_version=VLLM, operator=OperatorOptions(affinity=bad))
    bad.write_text('{"nodeSelector": {"a": "b"}}')
    with pytest.raises(UsageError, match="not an affinity object"):
        export_kubernetes(small_repo, vllm_version=VLLM, operator=OperatorOptions(affinity=bad))


def test_a_local_model_path_is_a_finding_unless_a_volume_mounts_it(tmp_path, hf_cache):
    repo = make_repository(tmp_path / "r", {"m": {"model": "/data/qwen"}})
    bare = export_kubernetes(repo, vllm_version=VLLM)
    (finding,) = [f for f in bare.findings if "/data/qwen" in f.message]
    assert finding.code == "VE103" and "--volume" in (finding.hint or "")
    # It points at the key in model.json, as validate's findings do.
    assert finding.file and finding.file.endswith("model.json") and finding.line == 2
    mounted = export_kubernetes(repo, vllm_version=VLLM, operator=OperatorOptions(volumes=("weights/qwen:/data/qwen",)))
    assert not [f for f in mounted.findings if "/data/qwen" in f.message]
    parent = export_kubernetes(repo, vllm_version=VLLM, operator=OperatorOptions(volumes=("weights:/data",)))
    assert not [f for f in parent.findings if "/data/qwen" in f.message]


def test_a_release_other_than_the_repositorys_is_a_finding(small_repo):
    assert export_kubernetes(small_repo, vllm_version=VLLM).findings == []
    newer = export_kubernetes(small_repo, vllm_version="0.32.0")
    assert newer.build is not None and newer.build.base.endswith(":26.08-vllm-python-py3")
    (finding,) = newer.findings
    assert finding.code == "VE101" and "0.32.0" in finding.message and "0.27.1" in finding.message
    assert f"warning: {finding.location()}: [VE101] {finding.message}" in newer.text  # also in the manifests' comments
    assert SMALL_MODEL in newer.text


def test_a_repository_validate_refuses_is_not_exported_and_the_error_carries_the_findings(tmp_path, hf_cache):
    from vllm_repo.export.plan import ExportFindingsError

    repo = make_repository(tmp_path / "r", {"m": {"model": SMALL_MODEL, "gpu_memory_utilisation": 0.5}})
    with pytest.raises(ExportFindingsError, match="does not pass validate") as refused:
        export_kubernetes(repo, vllm_version=VLLM)
    assert [d.code for d in refused.value.diagnostics if d.severity.value == "error"] == ["VR302"]
