"""init on a GPU that other models of the repository already use.

A new engine may take only what the others leave of their GPU, less the margin plan --pack keeps free (other processes'
memory, the estimator's error), and only a share the estimator says it starts in: vLLM refuses to start an engine
whose share is not free, and one whose share does not hold its weights never starts. When no such share is left, init
writes none (a guessed one would fail at load) and names what sizes every engine of the GPU together: plan --pack.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vllm_repo.repository.engine_settings import read_engine_settings

# The least share of a GPU worth starting an engine with: below it the weights of any model worth serving don't fit.
MIN_SHARE = 0.05
# What the GPU-sharing checks report while a new model waits for plan --pack to size the engines of its GPU.
SHARING_CODES = frozenset({"VR504", "VR603"})


@dataclasses.dataclass(frozen=True)
class GpuRoom:
    """What the repository's other engines leave on the GPUs a new model would run on."""

    taken: float  # the share the other engines claim of the fullest of those GPUs
    others: str  # who claims it: "chat 0.92 + coder 0.08"; empty when the GPUs are the new model's alone
    room: float  # the share the new model may take, the margin kept free (negative: none)
    default: float  # vLLM's default gpu_memory_utilization for the release

    @property
    def crowded(self) -> bool:
        """vLLM's default share does not fit beside the others (with the margin kept free)."""
        return bool(self.others) and self.room < self.default


def gpu_room(repo: Path, name: str, gpus: int, vllm_version: str | None) -> GpuRoom:
    """What the models of ``repo`` other than ``name`` leave on GPUs 0 to ``gpus`` - 1 (a model without an
    instance_group runs on the first GPUs)."""
    from vllm_repo.estimate.packing import fraction_room
    from vllm_repo.repository import open_repository, placement
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    default = load_schema(choose_schema_version(vllm_version, start=repo).schema_version).default_gpu_memory_utilization
    if not repo.is_dir():
        return GpuRoom(0.0, "", fraction_room(0.0), default)
    ids = range(min(max(gpus, 1), placement.MAX_GPU_IDS))
    left, on_it = placement.fraction_left(open_repository(repo), ids, default, without=name)
    others = " + ".join(f"{e.model.name} {e.fraction:g}" for e in on_it)
    return GpuRoom(1.0 - left, others, fraction_room(1.0 - left), default)


def engine_gpus(settings: dict, tensor_parallel_size: int | None, count: int | None) -> int:
    """How many GPUs the new model's engine takes: the count in --gpu (2xL4), else its parallel size."""
    return (
        count or read_engine_settings(settings).overridden_by(tensor_parallel_size=tensor_parallel_size).parallel_size
    )


def share_note(room: GpuRoom, share: float) -> str:
    return (
        f"gpu_memory_utilization {share:g}: what the other models on the same GPU leave ({room.others}), with plan's "
        "5 % margin kept free; --set gpu_memory_utilization=X to choose"
    )


def left_for_plan_note(room: GpuRoom, gpu: str | None, why: str | None) -> str:
    """Why init writes no share for a model on a crowded GPU."""
    left = f"{max(room.room, 0):.2f}"
    if gpu is None:
        return (
            f"gpu_memory_utilization left unset: the other models on the same GPU ({room.others}) leave {left} of it "
            "(plan's 5 % margin kept free), and without --gpu init can't tell whether this model starts in that. "
            "Name the GPU (`vllm-repo gpus` lists them): init --gpu sizes it into what is left, and plan with --gpu, "
            "--num-gpus and --pack all --write sizes every engine of the GPU together"
        )
    return (
        f"gpu_memory_utilization left unset: the other models on the same GPU ({room.others}) leave {left} of the "
        f"{gpu} (plan's 5 % margin kept free){f', and {why}' if why else ''}"
    )
