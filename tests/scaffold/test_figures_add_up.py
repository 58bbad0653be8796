"""Over the GPU catalog and the test models: nothing estimate, plan, init or validate prints has a part larger than its
whole ("X GiB of Y GiB"), and the gpu_memory_utilization values init and plan write for one GPU add up to at most 1
less plan's margin. Library calls only (no server), a few seconds."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.figures import parts_larger_than_wholes
from tests.support.model_configs import CONFIGS, write_hf_config
from vllm_repo.errors import VllmRepoError
from vllm_repo.estimate import CATALOG, estimate_model
from vllm_repo.estimate.packing import DEFAULT_MARGIN_FRACTION
from vllm_repo.estimate.report import render
from vllm_repo.repository.engine_settings import EngineSettings
from vllm_repo.scaffold import init_model
from vllm_repo.scaffold.plan import plan_repository
from vllm_repo.validate import validate_paths

MODELS = [*sorted(p.stem for p in CONFIGS.glob("*.json")), "tiny-llama"]
GPUS = [gpu.name for gpu in CATALOG]
# The models that start on one GPU of the larger ones, so that plan --pack has something to place.
PACKABLE = ["gpt-oss-20b", "llama-3.1-8b", "qwen2.5-1.5b", "qwen2.5-7b", "tiny-llama"]
MOST = 1 - DEFAULT_MARGIN_FRACTION + 1e-9
SLOW_OK = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def weights(root: Path, name: str) -> str:
    """The model's config.json in a directory of its own (no weights: the estimator sizes it from the shape)."""
    path = root / "weights" / name
    if name == "tiny-llama":
        return str(write_hf_config(path))
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text((CONFIGS / f"{name}.json").read_text())
    return str(path)


def said(exc: VllmRepoError) -> str:
    return "\n".join([exc.message, exc.hint or "", *(d.message + "\n" + (d.hint or "") for d in exc.diagnostics)])


def check(text: str) -> None:
    assert not parts_larger_than_wholes(text), text


@settings(SLOW_OK, max_examples=60)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    max_model_len=st.sampled_from([None, 512, 8192, 131072]),
    fraction=st.sampled_from([None, 0.05, 0.3, 0.9]),
    kv_cache_memory_bytes=st.sampled_from([None, 100_000, 2 << 30, 60 << 30]),
)
def test_estimate_prints_no_part_larger_than_its_whole(
    tmp_path_factory, model, gpu, max_model_len, fraction, kv_cache_memory_bytes
):
    path = weights(tmp_path_factory.getbasetemp(), model)
    sized = EngineSettings(
        max_model_len=max_model_len, gpu_memory_utilization=fraction, kv_cache_memory_bytes=kv_cache_memory_bytes
    )
    try:
        est = estimate_model(path, gpu, num_gpus=1, settings=sized, offline=True)
    except VllmRepoError as exc:
        check(said(exc))
        return
    check(render(est))
    for rec in est.recommendations:
        assert not (rec.setting == "tensor_parallel_size" and rec.value > 1), rec  # one GPU given


@settings(SLOW_OK, max_examples=12)
@given(
    models=st.lists(st.sampled_from(MODELS), min_size=2, max_size=3),
    gpu=st.sampled_from(GPUS),
    max_model_len=st.sampled_from([None, 2048, 8192]),
    first=st.sampled_from([None, 0.3, 0.6]),
)
def test_init_and_validate_leave_the_margin_and_print_no_part_larger_than_its_whole(
    tmp_path_factory, models, gpu, max_model_len, first
):
    root = tmp_path_factory.mktemp("init")
    repo = root / "repo"
    for index, model in enumerate(models):
        given_ = {"gpu_memory_utilization": first} if index == 0 and first is not None else {}
        try:
            result = init_model(
                repo, weights(root, model), name=f"m{index}", gpu=gpu, max_model_len=max_model_len, settings=given_
            )
        except VllmRepoError as exc:
            check(said(exc))
            continue
        check("\n".join(result.notes))
    written = [json.loads(p.read_text()) for p in repo.glob("*/1/model.json")]
    # All on GPU 0 (no instance_group): the user's share and those init wrote beside it leave the margin.
    assert sum(a.get("gpu_memory_utilization", 0) for a in written) <= MOST, written
    for found in validate_paths([repo], gpu=gpu, num_gpus=1).diagnostics if written else []:
        check(f"{found.message}\n{found.hint or ''}")


@settings(SLOW_OK, max_examples=15)
@given(
    models=st.lists(st.sampled_from(PACKABLE), min_size=1, max_size=3),
    gpu=st.sampled_from(GPUS),
    other_gpu=st.sampled_from(GPUS),
    max_model_len=st.sampled_from([2048, 8192]),
)
def test_plan_leaves_the_margin_and_prints_no_part_larger_than_its_whole(
    tmp_path_factory, models, gpu, other_gpu, max_model_len
):
    root = tmp_path_factory.mktemp("plan")
    repo = root / "repo"
    for index, model in enumerate(models):
        (repo / f"m{index}" / "1").mkdir(parents=True)
        (repo / f"m{index}" / "config.pbtxt").write_text('backend: "vllm"\n')
        args = {"model": weights(root, model), "max_model_len": max_model_len}
        (repo / f"m{index}" / "1" / "model.json").write_text(json.dumps(args))
    # Packed for one GPU, then planned for another: packed again, and on GPUs of their own.
    for target, pack, num_gpus in ((gpu, True, 1), (other_gpu, True, 1), (other_gpu, False, len(models))):
        try:
            planned = plan_repository(repo, target, num_gpus, 1, pack=pack)
        except VllmRepoError as exc:
            check(said(exc))
            continue
        check("\n".join(planned.explain(1)))
        for packed in planned.packed:
            assert sum(e.gpu_memory_utilization for e in packed.engines) <= MOST
        for path, (_, new) in planned.changes.items():
            path.write_text(new)
        for found in validate_paths([repo], gpu=target, num_gpus=num_gpus).diagnostics:
            check(f"{found.message}\n{found.hint or ''}")
