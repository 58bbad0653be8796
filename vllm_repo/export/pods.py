"""The objects of `export kubernetes` that hold pods: the server container (tritonserver with the command line
`launch --docker` runs, serve/container.py), the OpenAI gateway container beside it, the pod around them, and the
Deployment or LeaderWorkerSet, Service and PersistentVolumeClaim that carry them. plan.py decides what goes in;
each builder here makes one object or one part of it.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from vllm_repo.export.operator import Operator
from vllm_repo.serve.container import CONTAINER_REPOSITORY, server_args

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
RAY_PORT = 6379
REPOSITORY_MOUNT = CONTAINER_REPOSITORY
HF_HOME = "/hf-cache"
# vLLM's own cache (torch.compile artefacts) beside the weights: a restart on the same volume skips the compile.
VLLM_CACHE_ROOT = f"{HF_HOME}/vllm"
# The gateway's stream socket directory (its TMPDIR), shared with the server container: the backend writes streamed
# answers there rather than a Triton response per chunk.
GATEWAY_RUN_DIR = "/run/vllm-repo"
GATEWAY = "/opt/vllm-repo/bin/vllm-repo"
TRITON_VLLM_BACKEND_DIR = "/opt/tritonserver/backends/vllm"
GPU_RESOURCE = "nvidia.com/gpu"
HF_TOKEN_KEY = "token"
API_KEY_KEY = "key"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
PROBE_PERIOD_S = 10
MiB = 1024 * 1024
# Ray's object store lives in /dev/shm; vLLM passes little through it, so it is capped rather than Ray's default of
# 30% of the node's memory.
RAY_OBJECT_STORE_MIB = 2048
GATEWAY_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def probes(failure_threshold: int, port: str = "http", ready: str = "/v2/health/ready", live: str = "/v2/health/live"):
    def get(path: str) -> dict:
        return {"path": path, "port": port}

    return {
        "startupProbe": {"httpGet": get(ready), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": failure_threshold},
        "readinessProbe": {"httpGet": get(ready), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 3},
        "livenessProbe": {"httpGet": get(live), "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 6},
    }


def server_ports() -> list[dict]:
    return [
        {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
    ]


def tritonserver_args(operator: Operator) -> list[str]:
    """`launch --docker`'s tritonserver command line, plus how long Triton waits for requests in flight on SIGTERM."""
    return server_args(HTTP_PORT, GRPC_PORT, METRICS_PORT, extra=(f"--exit-timeout-secs={operator.exit_timeout_s}",))


@dataclasses.dataclass(frozen=True)
class Gateway:
    port: int
    api_key_secret: str | None


@dataclasses.dataclass(frozen=True)
class PodParts:
    """What every server pod has, whichever manifest holds it."""

    image: str
    env: list[dict]
    volumes: list[dict]
    mounts: list[dict]
    resources: dict
    init_containers: list[dict]
    startup_periods: int
    operator: Operator
    gateway: Gateway | None

    def server(self, name: str, command: list[str], *, probed: bool = True, ports: list[dict] | None = None) -> dict:
        container: dict[str, Any] = {"name": name, "image": self.image, "command": command}
        if probed:
            container["ports"] = server_ports() + (ports or [])
        container["env"] = self.env
        container["resources"] = self.resources
        if probed:
            container.update(probes(self.startup_periods))
        container["lifecycle"] = self.operator.lifecycle()
        container["securityContext"] = self.operator.container_security()
        # The gateway's socket directory, at the path the gateway names in its requests.
        container["volumeMounts"] = self.mounts + ([] if self.gateway is None or not probed else [_gateway_mount()])
        return container

    def gateway_container(self) -> list[dict]:
        if self.gateway is None:
            return []
        command = [
            GATEWAY,
            "openai",
            "--triton-url",
            f"http://127.0.0.1:{HTTP_PORT}",
            "--triton-metrics-port",
            str(METRICS_PORT),
            "--host",
            "0.0.0.0",
            "--port",
            str(self.gateway.port),
        ]
        env = [_gateway_tmpdir()]
        if self.gateway.api_key_secret:
            secret = {"name": self.gateway.api_key_secret, "key": API_KEY_KEY}
            env.append({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": secret}})
        return [
            {
                "name": "openai",
                "image": self.image,
                "command": command,
                "ports": [{"name": "openai", "containerPort": self.gateway.port, "protocol": "TCP"}],
                "env": env,
                "resources": GATEWAY_RESOURCES,
                # /health answers once the gateway listens; Triton's own probes say when the models are ready.
                "readinessProbe": {
                    "httpGet": {"path": "/health", "port": "openai"},
                    "periodSeconds": PROBE_PERIOD_S,
                    "failureThreshold": 3,
                },
                "lifecycle": self.operator.lifecycle(),
                "securityContext": self.operator.container_security(),
                "volumeMounts": [_gateway_mount()],
            }
        ]

    def pod(self, containers: list[dict]) -> dict[str, Any]:
        pod: dict[str, Any] = {}
        if self.init_containers:
            pod["initContainers"] = self.init_containers
        pod["containers"] = containers
        pod["volumes"] = self.volumes + ([] if self.gateway is None else [{"name": "gateway-run", "emptyDir": {}}])
        pod["securityContext"] = self.operator.pod_security()
        pod["terminationGracePeriodSeconds"] = self.operator.grace_period_s
        pod.update(self.operator.scheduling())
        return pod


def _gateway_tmpdir() -> dict:
    return {"name": "TMPDIR", "value": GATEWAY_RUN_DIR}


def _gateway_mount() -> dict:
    return {"name": "gateway-run", "mountPath": GATEWAY_RUN_DIR}


def pod_metadata(labels: dict) -> dict:
    """Pod labels, and the annotations by which a Prometheus that honours them scrapes Triton's metrics port (vLLM's
    gauges, which the autoscaler reads through an adapter)."""
    return {
        "labels": labels,
        "annotations": {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(METRICS_PORT),
            "prometheus.io/path": "/metrics",
        },
    }


def service(name: str, labels: dict, selector: dict, gateway: Gateway | None) -> dict:
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in server_ports()
    ]
    if gateway is not None:
        ports.append({"name": "openai", "port": gateway.port, "targetPort": "openai", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def claim(name: str, labels: dict, spec: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def deployment(name: str, labels: dict, parts: PodParts) -> dict:
    """One pod running tritonserver (and the gateway beside it)."""
    containers = [parts.server("tritonserver", tritonserver_args(parts.operator)), *parts.gateway_container()]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            # A rolling update would need a second set of GPUs while the old pod still holds its own.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": pod_metadata(labels), "spec": parts.pod(containers)},
        },
    }


def leader_worker_set(
    name: str, labels: dict, parts: PodParts, size: int, world: int, node_gpus: int, claims: list[dict]
) -> dict:
    """A leader pod that starts the Ray head, waits for every GPU of the group, and runs tritonserver; worker pods
    that join its Ray cluster. ``claims``: volumeClaimTemplates, one claim per pod."""
    ray_env: list[dict] = [
        {"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        # Ray workers unpickle the backend's classes: they must find the backend's modules.
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
        f"exec {shlex.join(tritonserver_args(parts.operator))}\n"
    )
    worker_script = (
        f'until ray health-check --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" >/dev/null 2>&1; do sleep 5; done\n'
        f'exec ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" {ray_node} --block\n'
    )
    ray_parts = dataclasses.replace(parts, env=parts.env + ray_env)
    leader = ray_parts.server(
        "tritonserver",
        ["sh", "-c", leader_script],
        ports=[{"name": "ray-gcs", "containerPort": RAY_PORT, "protocol": "TCP"}],
    )
    worker = ray_parts.server("ray-worker", ["sh", "-c", worker_script], probed=False)
    worker_parts = dataclasses.replace(ray_parts, gateway=None)
    template: dict[str, Any] = {
        "size": size,
        # One pod lost takes the engine down: restart the group together.
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {
            "metadata": pod_metadata({**labels, "role": "leader"}),
            "spec": ray_parts.pod([leader, *ray_parts.gateway_container()]),
        },
        "workerTemplate": {"metadata": {"labels": {**labels, "role": "worker"}}, "spec": worker_parts.pod([worker])},
    }
    if claims:
        template["volumeClaimTemplates"] = claims
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "leaderWorkerTemplate": template},
    }
