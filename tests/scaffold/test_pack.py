"""plan --pack: engines sharing a GPU, each with an absolute KV cache sized from the estimator, their footprints
adding up to the GPU's memory less the margin; and what validate says of a packed repository."""

import json
import subprocess
import sys

import pytest

from tests.support.model_configs import published_config
from tests.support.repo_builder import RepoBuilder, codes, only, run
from vllm_repo.estimate import resolve_gpu
from vllm_repo.estimate.model_facts import load_model_facts
from vllm_repo.estimate.packing import GiB, PackError, engine_cost, pack
from vllm_repo.releases.memory_budget import resolve_release
from vllm_repo.repository.engine_settings import EngineSettings
from vllm_repo.scaffold.plan import PlanError, plan_repository

KIND_GPU_0 = 'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n'


@pytest.fixture
def weights(tmp_path):
    """Published config.json files (no weights): an 8B Llama and a 1.5B Qwen."""
    dirs = {}
    for name in ("llama-3.1-8b", "qwen2.5-1.5b"):
        path = tmp_path / "weights" / name
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps(published_config(name)))
        dirs[name] = str(path)
    return dirs


@pytest.fixture
def repo(tmp_path):
    return RepoBuilder(tmp_path / "model_repository")


def costs(weights, concurrency=8, max_model_len=8192, release="0.26.0", gpu="H100 80GB"):
    gpu_, (rel, _) = resolve_gpu(gpu), resolve_release(release)
    found = []
    for name, path in weights.items():
        settings = EngineSettings(model=path, max_model_len=max_model_len)
        found.append(engine_cost(name, settings, load_model_facts(path, offline=True), gpu_, rel, concurrency))
    return gpu_, rel, found


def test_a_set_that_fits_fills_the_gpu_to_its_margin_with_equal_headroom(weights):
    gpu, release, found = costs(weights)
    (packed,) = pack(found, gpu, release, [0])
    assert len(packed.engines) == 2
    # The footprints fill the GPU but for the margin (whole MiB rounding apart), and never beyond it.
    assert 0 <= packed.left_bytes - packed.margin_bytes < 4 * (1 << 20)
    assert packed.margin_bytes == pytest.approx(0.05 * gpu.total_bytes, rel=1e-6)
    for engine in packed.engines:
        est = engine.estimate
        assert est.fits and engine.kv_bytes >= engine.cost.kv_min_bytes
        assert est.max_concurrency >= engine.cost.concurrency  # the KV cache written holds what was asked
        # The fraction written covers what vLLM subtracts from it plus the KV cache, and no more than the footprint.
        assert engine.gpu_memory_utilization * gpu.total_bytes >= engine.kv_bytes
        assert engine.gpu_memory_utilization * gpu.total_bytes <= engine.footprint_bytes
    # Equal headroom: every engine holds the same multiple of the concurrency asked for.
    ratios = [e.kv_bytes / e.cost.kv_min_bytes for e in packed.engines]
    assert max(ratios) - min(ratios) < 0.01
    assert sum(e.gpu_memory_utilization for e in packed.engines) < 1.0


def test_a_set_that_misses_by_a_little_is_refused_with_the_numbers(weights):
    gpu, release, found = costs(weights)
    need = sum(c.min_footprint_bytes for c in found)
    # The margin that leaves 100 MiB too little for the smallest footprints.
    margin_gib = (gpu.total_bytes - need + 100 * (1 << 20)) / GiB
    with pytest.raises(PackError) as caught:
        pack(found, gpu, release, [0], margin_gib=margin_gib)
    assert "GiB" in caught.value.message and "--concurrency" in caught.value.hint
    # 200 MiB less margin, and it fits.
    (packed,) = pack(found, gpu, release, [0], margin_gib=margin_gib - 200 / 1024)
    assert packed.left_bytes >= packed.margin_bytes


def test_engines_that_do_not_fit_one_gpu_together_go_to_the_next(weights):
    gpu, release, found = costs(weights, concurrency=48)
    assert sum(c.min_footprint_bytes for c in found) > gpu.total_bytes * 0.95  # too much for one GPU
    packed = pack(found, gpu, release, [0, 1])
    assert [len(p.engines) for p in packed] == [1, 1]
    with pytest.raises(PackError, match="GPU 0"):
        pack(found, gpu, release, [0])


def test_releases_without_an_absolute_kv_cache_get_the_fraction_that_gives_it(weights):
    gpu, release, found = costs(weights, release="0.9.2")
    (packed,) = pack(found, gpu, release, [0])
    for engine in packed.engines:
        # vLLM 0.9 sizes the KV cache from the fraction: what it leaves is the KV cache planned, within rounding.
        assert engine.estimate.kv_cache_gib * GiB == pytest.approx(engine.kv_bytes, abs=0.01 * GiB)
    gpu, old, found = costs(weights, release="0.7.3")
    with pytest.raises(PackError, match="counts every process's memory"):
        pack(found, gpu, old, [0])


def test_plan_pack_writes_budgets_that_validate_accepts_and_plan_reads_again(repo, weights):
    for name, path in (("chat", weights["llama-3.1-8b"]), ("small", weights["qwen2.5-1.5b"])):
        repo.model(name, engine_args={"model": path, "max_model_len": 8192})
    with pytest.raises(PlanError) as caught:  # without --pack: two GPUs wanted, one given, and packing named
        plan_repository(repo.root, "H100 80GB", 1, concurrency=8, vllm_version="0.26.0")
    assert "1 is given" in caught.value.message and "--pack all" in caught.value.hint
    planned = plan_repository(repo.root, "H100 80GB", 1, concurrency=8, vllm_version="0.26.0", pack=True)
    assert planned.absolute and not planned.models and len(planned.packed[0].engines) == 2
    for path, (_, new) in planned.changes.items():
        path.write_text(new)
    chat = json.loads((repo.root / "chat" / "1" / "model.json").read_text())
    by_name = {e.name: e for e in planned.packed[0].engines}
    assert chat["kv_cache_memory_bytes"] == by_name["chat"].kv_bytes and chat["tensor_parallel_size"] == 1
    config = (repo.root / "chat" / "config.pbtxt").read_text()
    assert "gpus: [ 0 ]" in config and "shared with small" in config
    found = codes(run(repo.root, gpu="H100 80GB", num_gpus=1, vllm_version="0.26.0"))
    assert not found & {"VR504", "VR601", "VR603"}
    again = plan_repository(repo.root, "H100 80GB", 1, concurrency=8, vllm_version="0.26.0", pack=["chat", "small"])
    assert again.changes == {}  # packed once, packed for good


def test_cli_pack_option_and_project_setting(repo, weights, tmp_path):
    for name, path in (("chat", weights["llama-3.1-8b"]), ("small", weights["qwen2.5-1.5b"])):
        repo.model(name, engine_args={"model": path, "max_model_len": 8192})
    base = [sys.executable, "-m", "vllm_repo", "plan", str(repo.root), "--gpu", "H100", "--num-gpus", "1"]
    base += ["--vllm-version", "0.26.0", "--concurrency", "8"]
    refused = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode == 1 and "--pack all" in refused.stderr
    shown = subprocess.run([*base, "--pack", "chat,small"], capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "GPU 0: 2 engines packed (chat, small)" in shown.stdout and "kv_cache_memory_bytes" in shown.stdout
    unknown = subprocess.run([*base, "--pack", "nope"], capture_output=True, text=True, cwd=tmp_path)
    assert unknown.returncode == 1 and "no vLLM model named nope" in unknown.stderr
    (tmp_path / ".vllm-repo.toml").write_text("pack = true\n")
    from_settings = subprocess.run(base, capture_output=True, text=True, cwd=tmp_path)
    assert from_settings.returncode == 0 and "2 engines packed" in from_settings.stdout


def test_a_repository_packed_for_another_gpu_is_replanned_for_the_gpu_given(repo, weights):
    from tests.support.figures import parts_larger_than_wholes

    for name, path in (("chat", weights["llama-3.1-8b"]), ("small", weights["qwen2.5-1.5b"])):
        repo.model(name, engine_args={"model": path, "max_model_len": 8192})
    packed = plan_repository(repo.root, "H200", 1, concurrency=1, vllm_version="0.26.0", pack=True)
    for path, (_, new) in packed.changes.items():
        path.write_text(new)
    # The same repository on two H100s, a GPU each: the H200-sized budgets don't carry over.
    planned = plan_repository(repo.root, "H100 80GB", 2, concurrency=1, vllm_version="0.26.0")
    explained = "\n".join(planned.explain(1))
    assert not parts_larger_than_wholes(explained), explained
    for path, (_, new) in planned.changes.items():
        path.write_text(new)
    for name in ("chat", "small"):
        args = json.loads((repo.root / name / "1" / "model.json").read_text())
        assert "kv_cache_memory_bytes" not in args, args
    found = codes(run(repo.root, gpu="H100 80GB", num_gpus=2, vllm_version="0.26.0"))
    assert not found & {"VR504", "VR601", "VR603"}, found


def test_vr603_and_plan_hints_print_pack_commands_that_run(repo, weights, tmp_path):
    from tests.support.figures import commands_in, run_as_printed

    for name, path in (("chat", weights["llama-3.1-8b"]), ("small", weights["qwen2.5-1.5b"])):
        repo.model(name, engine_args={"model": path, "max_model_len": 8192})
    # Without --pack the two need two GPUs: plan's hint names the command that packs them onto one.
    with pytest.raises(PlanError) as caught:
        plan_repository(repo.root, "H100 80GB", 1, concurrency=8, vllm_version="0.26.0")
    (shown,) = commands_in(caught.value.hint)
    assert run_as_printed(shown, tmp_path).exit_code == 0, shown
    # Packed for an H200, validated for an H100: VR603's hint repacks them, as printed.
    packed = plan_repository(repo.root, "H200", 1, concurrency=1, vllm_version="0.26.0", pack=True)
    for path, (_, new) in packed.changes.items():
        path.write_text(new)
    (d,) = only(run(repo.root, gpu="H100 80GB", num_gpus=1, vllm_version="0.26.0"), "VR603")
    (command,) = commands_in(d.hint)
    result = run_as_printed(command, tmp_path)
    assert result.exit_code == 0, result.output
    assert "VR603" not in codes(run(repo.root, gpu="H100 80GB", num_gpus=1, vllm_version="0.26.0"))


def test_pack_followed_by_an_option_is_a_usage_error_naming_pack_all(repo, weights, tmp_path):
    from tests.support.figures import run_as_printed

    repo.model("chat", engine_args={"model": weights["qwen2.5-1.5b"], "max_model_len": 8192})
    result = run_as_printed(f"vllm-repo plan {repo.root} --gpu H100 --num-gpus 1 --pack --write", tmp_path)
    assert result.exit_code == 2 and "--pack all --write" in result.output, result.output
