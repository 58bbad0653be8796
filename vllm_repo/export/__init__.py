"""Deployment manifests for a model repository: `export kubernetes` (kubernetes.py), written as YAML by yaml.py."""

from vllm_repo.export.kubernetes import KubernetesExport, export_kubernetes, write_export

__all__ = ["KubernetesExport", "export_kubernetes", "write_export"]
