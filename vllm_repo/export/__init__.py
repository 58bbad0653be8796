"""Deployment manifests for a model repository: `export kubernetes`, decided as a plan (plan.py) and rendered as
manifests (kubernetes.py), written as YAML by yaml.py."""

from vllm_repo.export.kubernetes import KubernetesExport, export_kubernetes, render, write_export
from vllm_repo.export.plan import KubernetesPlan, plan_kubernetes

__all__ = ["KubernetesExport", "KubernetesPlan", "export_kubernetes", "plan_kubernetes", "render", "write_export"]
