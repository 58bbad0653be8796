"""What to tell someone whose engines crowd a GPU: the `vllm-repo plan --pack all` command that sizes them all
together, where packing them works (checked with the packing arithmetic, as plan would run it), or why it doesn't.
init and validate's VR601 and VR603 say it."""

from __future__ import annotations

import shlex
from pathlib import Path

from vllm_repo.errors import UsageError
from vllm_repo.estimate.gpus import Gpu


def gpu_argument(gpu: Gpu) -> str:
    """The --gpu value that names ``gpu`` again: its catalog name, or its size in GiB."""
    return gpu.name if gpu.board_mib is not None or gpu.runtime_gib is None else f"{gpu.runtime_gib:g}"


def pack_command(repo: Path, gpu: str, num_gpus: int, vllm_version: str | None = None, *, write: bool = True) -> str:
    """The plan command that sizes every model of ``repo`` together on ``num_gpus`` x ``gpu``, as a shell runs it."""
    words = ["vllm-repo", "plan", str(repo), "--gpu", gpu, "--num-gpus", str(num_gpus)]
    if vllm_version:
        words += ["--vllm-version", vllm_version]
    words += ["--pack", "all"]
    if write:
        words.append("--write")
    return shlex.join(words)


def packing_advice(
    repo: Path, gpu: Gpu, num_gpus: int, vllm_version: str | None = None, shown_as: Path | None = None
) -> str:
    """The command that packs the vLLM models of ``repo`` onto ``num_gpus`` x ``gpu`` (naming the repository at
    ``shown_as``, where ``repo`` stands in for it), where they fit so; else why they don't."""
    from vllm_repo.estimate import ArchitectureError, ModelFactsError, load_model_facts
    from vllm_repo.estimate.packing import PackError, engine_cost, pack
    from vllm_repo.releases.memory_budget import resolve_release
    from vllm_repo.repository import open_repository, placement

    release, _ = resolve_release(vllm_version, repo)
    where = f"{num_gpus} x {gpu_argument(gpu)}"
    costs = []
    try:
        for engine in placement.engines(open_repository(repo).models, 1.0):
            settings = engine.settings
            facts = load_model_facts(
                settings.model or "", offline=True, revision=settings.revision, base=engine.model.path
            )
            facts.arch.check_decoder_shape()
            costs.append(engine_cost(engine.model.name, settings, facts, gpu, release, 1))
        packed = pack(costs, gpu, release, range(num_gpus))
    except (PackError, ModelFactsError, ArchitectureError) as exc:
        return f"packed, they don't fit on {where} either ({exc.message})"
    except (UsageError, ArithmeticError) as exc:  # settings the estimator can't read: validate's other findings
        return f"plan --pack can't size them ({getattr(exc, 'message', exc)})"
    command = pack_command(shown_as or repo, gpu_argument(gpu), num_gpus, vllm_version)
    engines = sum(len(p.engines) for p in packed)
    return f"`{command}` sizes them all together on {where} ({engines} engines, each with a budget of its own)"
