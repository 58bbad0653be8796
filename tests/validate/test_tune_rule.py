"""VR510: model.json against the settings `vllm-repo tune --write` recorded in tune.json."""

import json

from tests.support.repo_builder import GOOD_ENGINE_ARGS, codes, only, run


def tune_json(settings: dict, version: str = "1") -> dict[str, str]:
    return {"tune.json": json.dumps({"written": {"version": version, "settings": settings, "instances": 1}})}


def test_model_json_with_the_tuned_settings_passes(repo):
    engine_args = {**GOOD_ENGINE_ARGS, "max_num_seqs": 8, "enable_prefix_caching": False}
    settings = {"max_num_seqs": 8, "max_num_batched_tokens": None, "enable_prefix_caching": False}
    repo.model(engine_args=engine_args, files=tune_json(settings))
    assert "VR510" not in codes(run(repo.root))


def test_a_changed_or_added_tuned_setting_is_reported_where_it_is_written(repo):
    engine_args = {**GOOD_ENGINE_ARGS, "max_num_seqs": 64, "max_num_batched_tokens": 4096}
    repo.model(engine_args=engine_args, files=tune_json({"max_num_seqs": 8, "max_num_batched_tokens": None}))
    found = sorted(only(run(repo.root), "VR510"), key=lambda d: d.message)
    assert len(found) == 2
    assert found[0].severity.value == "warning"
    assert found[0].message.startswith("max_num_batched_tokens: model.json sets 4096, but vllm-repo tune left it to")
    assert found[1].message.startswith("max_num_seqs: model.json sets 64, but vllm-repo tune chose 8")
    assert found[1].line == 5  # where model.json sets max_num_seqs


def test_a_removed_tuned_setting_is_reported(repo):
    repo.model(files=tune_json({"max_num_seqs": 8}))
    (finding,) = only(run(repo.root), "VR510")
    assert "model.json leaves it out" in finding.message


def test_a_quoted_value_counts_as_what_it_spells(repo):
    repo.model(engine_args={**GOOD_ENGINE_ARGS, "max_num_seqs": "8"}, files=tune_json({"max_num_seqs": 8}))
    assert "VR510" not in codes(run(repo.root))


def test_a_tune_json_that_wrote_nothing_or_is_not_readable_is_no_finding(repo):
    repo.model(name="stopped", files={"tune.json": json.dumps({"written": None, "candidates": []})})
    repo.model(name="broken", files={"tune.json": "{not json"})
    repo.model(name="other-version", files=tune_json({"max_num_seqs": 8}, version="2"))
    assert "VR510" not in codes(run(repo.root))
