"""tune's sizing, without a server: the GPU it sizes for (nvidia-smi's, --gpu's, or the CPU's KV cache), the tokens a
request takes, the estimator's verdict on a candidate (remembered, and why it drops one), and the switches tried."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.model_configs import write_hf_config
from vllm_repo.benchmark import Slo
from vllm_repo.releases.memory_budget import resolve_release
from vllm_repo.settings import ProjectSettings
from vllm_repo.tune import sizing
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.sizing import Sizer, default_switch, detect_gpus, gpu_for, make_axes, tokens_per_request
from vllm_repo.tune.space import CHUNKED_PREFILL, PREFIX_CACHING, Candidate
from vllm_repo.tune.spec import TuneSpec


def nvidia_smi(monkeypatch, stdout: str = "", returncode: int = 0, error: Exception | None = None) -> None:
    def run(*args, **kwargs):
        if error is not None:
            raise error
        return subprocess.CompletedProcess(args, returncode, stdout=stdout, stderr="")

    monkeypatch.setattr(sizing.subprocess, "run", run)


def test_the_gpus_are_read_from_nvidia_smi(monkeypatch):
    nvidia_smi(monkeypatch, "81559\n81559\n")
    assert detect_gpus() == (81559 / 1024, 2)


@pytest.mark.parametrize(
    "stdout, returncode, error",
    [("", 0, FileNotFoundError("nvidia-smi")), ("", 0, subprocess.TimeoutExpired("nvidia-smi", 30)),
     ("81559\n", 9, None), ("No devices were found\n", 0, None)],
)  # fmt: skip
def test_no_nvidia_smi_or_no_answer_from_it_is_no_gpu(monkeypatch, stdout, returncode, error):
    nvidia_smi(monkeypatch, stdout, returncode, error)
    assert detect_gpus() is None


def test_without_a_gpu_the_candidates_are_sized_against_the_cpus_kv_cache():
    gpu, num_gpus, notes = gpu_for(ProjectSettings(), has_gpu=False)
    assert gpu is None and num_gpus == 1
    assert notes == ["no NVIDIA GPU: candidates are sized against the CPU's KV cache only"]


def test_a_gpu_given_on_a_host_without_one_is_sized_for_and_the_figures_are_said_to_be_the_cpus():
    gpu, num_gpus, notes = gpu_for(ProjectSettings(gpu="H100 80GB", num_gpus=4), has_gpu=False)
    assert gpu.name == "H100 80GB" and num_gpus == 4
    assert "the figures are the CPU's" in notes[0]


def test_the_hosts_gpus_come_from_nvidia_smi_unless_given(monkeypatch):
    nvidia_smi(monkeypatch, "81559\n81559\n")
    gpu, num_gpus, notes = gpu_for(ProjectSettings(), has_gpu=True)
    assert num_gpus == 2 and notes == [] and "79.6" in gpu.name  # a GPU of nvidia-smi's size
    assert gpu_for(ProjectSettings(num_gpus=1), has_gpu=True)[1] == 1
    nvidia_smi(monkeypatch, returncode=9)
    with pytest.raises(TuneError, match="nvidia-smi does not describe") as raised:
        gpu_for(ProjectSettings(), has_gpu=True)
    assert raised.value.hint == "give --gpu NAME"


def test_a_request_takes_its_prompt_and_its_output_and_a_datasets_are_counted_approximately(tmp_path):
    spec = TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1000), input_len=300, output_len=20)
    assert tokens_per_request(spec) == (320, False)
    assert tokens_per_request(TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1000), input_len=300)) == (428, False)
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "' + "abcd" * 10 + '", "output_tokens": 6}\n{"prompt": "ab", "output_tokens": 4}\n')
    # 40 bytes (10 tokens) and 6 out; 2 bytes (1 token) and 4 out: 11 on average.
    assert tokens_per_request(TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1), dataset=dataset)) == (11, True)


def sizer(tmp_path, cpu_kv_bytes: int, concurrency: int | None = 8, **args) -> Sizer:
    model = write_hf_config(tmp_path / "model")
    original = {"model": str(model), "max_model_len": 512, **args}
    return Sizer(original, tmp_path, "0.32.0", None, cpu_kv_bytes, concurrency, 512)


def test_a_candidate_the_cpus_kv_cache_holds_runs_and_its_verdict_is_remembered(tmp_path):
    sized = sizer(tmp_path, 4 * 2**30)
    verdict = sized.size(Candidate())
    assert verdict.dropped is None and verdict.fits is None  # no GPU: only the KV cache is sized
    assert verdict.needed_tokens == 8 * 512 and verdict.kv_cache_tokens > verdict.needed_tokens
    assert sized.size(Candidate.of({}, stage="confirm")) is verdict  # the same settings: sized once
    assert sized.where == "in the CPU's KV cache (4 GiB)"


def test_a_kv_cache_too_small_for_the_load_drops_the_candidate_and_says_why(tmp_path):
    sized = sizer(tmp_path, 2 * 2**20)
    dropped = sized.size(Candidate()).dropped or ""
    assert "cannot hold the load: 8 requests of 512 tokens at once need 4,096" in dropped
    # Split over two instances, each engine holds half the requests: they fit.
    halves = sized.size(Candidate.of({}, instances=2))
    assert halves.dropped is None and halves.needed_tokens == 4 * 512 <= (halves.kv_cache_tokens or 0)


def test_settings_vllm_refuses_are_dropped_without_asking_the_estimator(tmp_path):
    sized = sizer(tmp_path, 4 * 2**30)
    refused = sized.size(Candidate.of({"max_num_seqs": 64, "max_num_batched_tokens": 32}))
    assert refused.dropped == "vLLM refuses max_num_batched_tokens (32) smaller than max_num_seqs (64)"
    assert refused.kv_cache_tokens is None


def test_a_model_whose_config_cannot_be_read_cannot_be_sized(tmp_path):
    sized = Sizer({"model": str(tmp_path / "absent")}, tmp_path, "0.32.0", None, 2**30, 8, 512)
    with pytest.raises(TuneError, match="cannot size") as raised:
        sized.size(Candidate())
    assert "offline" in (raised.value.hint or "")


def test_each_switch_is_tried_the_other_way_from_model_json_or_vllms_default(tmp_path):
    release, _ = resolve_release("0.32.0")
    sized = sizer(tmp_path, 4 * 2**30, enable_prefix_caching="true")  # quoted, as Triton's own files often have it
    sized.size(Candidate())
    spec = TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1), switches=[PREFIX_CACHING, CHUNKED_PREFILL])
    axes, notes = make_axes(spec, sized.original, sized, set(), release, 1)
    values = {switch.key: switch.value_for(Candidate()) for switch in axes.switches}
    assert values == {PREFIX_CACHING: False, CHUNKED_PREFILL: not default_switch(CHUNKED_PREFILL, release, 512)}
    assert default_switch(PREFIX_CACHING, release, 512) is True  # on by default from the V1 engine
    assert notes == []
    graphs, graph_notes = make_axes(
        TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1), switches=["cudagraph"]),
        sized.original, sized, set(), release, 1,
    )  # fmt: skip
    assert graphs.switches == [] and graph_notes[0].startswith("CUDA-graph capture size not tried")


def test_the_search_axes_follow_the_load_unless_given(tmp_path):
    release, _ = resolve_release("0.32.0")
    sized = sizer(tmp_path, 4 * 2**30)
    given = TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1), max_num_seqs=[16, 4, 16], switches=[])
    axes, _ = make_axes(given, sized.original, sized, set(), release, 1)
    assert axes.max_num_seqs == [4, 16] and axes.switches == []
    assert axes.layouts == []  # one GPU: no other layout
