"""The Triton model repository as data: which models a set of paths names, the files of each model directory, and
those files loaded into documents that remember where each thing is written.

This is the one place that knows Triton's file names and what makes a model a vLLM-backend model; the checks
(vllm_repo.validate), the estimator, init and launch read repositories through it.
"""

from vllm_repo.repository.discovery import (
    CONFIG_FILE,
    ENGINE_ARGS_FILE,
    LORA_FILE,
    MODEL_FILES,
    OPENAI_FILE,
    VLLM_BACKEND,
    ModelDirectory,
    ModelRepository,
    PathError,
    VersionDirectory,
    discover,
    is_version_name,
    open_repository,
)

__all__ = [
    "CONFIG_FILE",
    "ENGINE_ARGS_FILE",
    "LORA_FILE",
    "MODEL_FILES",
    "OPENAI_FILE",
    "VLLM_BACKEND",
    "ModelDirectory",
    "ModelRepository",
    "PathError",
    "VersionDirectory",
    "discover",
    "is_version_name",
    "open_repository",
]
