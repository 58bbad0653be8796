"""upgrade: model.json keys carried to another vLLM release, the defaults that change, the backend's support, and the
command's files and exit codes. Releases are picked from the bundled schemas' own history, not written down here."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.repo_builder import OFFICIAL_CONFIG
from vllm_repo.cli import build_app
from vllm_repo.diagnostics.fixes import remove_json_keys
from vllm_repo.errors import UsageError
from vllm_repo.releases.ngc import RELEASES
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.schema.history import CURATED, releases_with
from vllm_repo.schema.loader import bundled_versions, load_schema, release_key
from vllm_repo.upgrade import resolve_target, upgrade_paths
from vllm_repo.upgrade.migrate import changed_defaults, plan_migration, written_for

NEWEST = bundled_versions()[-1]


def last_with(key: str) -> str:
    return releases_with(key)[-1]


def first_without(key: str) -> str:
    """The first bundled release after the last one that has ``key``."""
    return next(v for v in bundled_versions() if release_key(v) > release_key(last_with(key)))


def write_model(root: Path, engine_args: dict | str, name: str = "llm") -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(OFFICIAL_CONFIG)
    path = root / name / "1" / "model.json"
    path.write_text(engine_args if isinstance(engine_args, str) else json.dumps(engine_args, indent=4) + "\n")
    return path


def migrate(tmp_path: Path, data: dict, source: str, target: str):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data, indent=2))
    doc = JsonDocument.load(path)
    migration = plan_migration(doc, load_schema(source), load_schema(target))
    new = doc.text
    for edit in sorted(migration.fix.edits if migration.fix else (), key=lambda e: e.span.start, reverse=True):
        new = new[: edit.span.start] + edit.text + new[edit.span.end :]
    return migration, json.loads(new)


def actions(migration) -> dict[str, str]:
    return {c.key: c.action for c in migration.changes}


# -- one key at a time --------------------------------------------------------------------------------------------


def test_a_plain_rename_keeps_the_value_and_the_key_order(tmp_path):
    old = next(k for k, r in CURATED.items() if r.plain and releases_with(k) and last_with(k) != NEWEST)
    source, target = last_with(old), first_without(old)
    new = CURATED[old].new
    migration, data = migrate(tmp_path, {"model": "m", old: [1, 2], "seed": 3}, source, target)
    assert list(data) == ["model", new, "seed"] and data[new] == [1, 2]
    assert actions(migration) == {old: "renamed"}


@pytest.mark.parametrize("value, expected", [(True, False), ("true", False), (False, True)])
def test_disable_log_requests_becomes_enable_log_requests_with_the_meaning_inverted(tmp_path, value, expected):
    source, target = last_with("disable_log_requests"), first_without("disable_log_requests")
    migration, data = migrate(tmp_path, {"model": "m", "disable_log_requests": value}, source, target)
    assert data == {"model": "m", "enable_log_requests": expected}
    assert actions(migration) == {"disable_log_requests": "rewritten"}


def test_a_value_that_was_the_default_goes_with_its_key(tmp_path):
    source, target = last_with("worker_use_ray"), first_without("worker_use_ray")
    migration, data = migrate(tmp_path, {"model": "m", "worker_use_ray": False, "seed": 1}, source, target)
    assert data == {"model": "m", "seed": 1}
    assert actions(migration) == {"worker_use_ray": "removed"}
    _, data = migrate(tmp_path, {"model": "m", "worker_use_ray": True}, source, target)
    assert data == {"model": "m", "distributed_executor_backend": "ray"}


def test_keys_that_moved_into_one_config_object_are_merged_there(tmp_path):
    source, target = last_with("speculative_model"), NEWEST
    original = {"model": "m", "speculative_model": "draft", "tensor_parallel_size": 2, "num_speculative_tokens": 5}
    migration, data = migrate(tmp_path, original, source, target)
    assert data == {
        "model": "m",
        "speculative_config": {"model": "draft", "num_speculative_tokens": 5},
        "tensor_parallel_size": 2,
    }
    assert actions(migration) == {"speculative_model": "moved", "num_speculative_tokens": "moved"}
    # Into the object the file already has; a clash is the user's to settle.
    _, data = migrate(tmp_path, {"speculative_config": {"method": "ngram"}, "speculative_model": "d"}, source, target)
    assert data == {"speculative_config": {"method": "ngram", "model": "d"}}
    clash = {"speculative_config": {"model": "a"}, "speculative_model": "b"}
    migration, data = migrate(tmp_path, clash, source, target)
    assert data == clash and actions(migration) == {"speculative_model": "manual"}
    assert migration.fix is None


def test_a_removed_key_without_a_replacement_is_removed_and_said(tmp_path):
    source = bundled_versions()[0]
    target = NEWEST
    gone = sorted(
        k
        for k in load_schema(source).fields
        if k not in load_schema(target).fields and k not in CURATED and releases_with(k)[-1] != NEWEST
    )
    from vllm_repo.schema.history import replacement_for

    key = next(k for k in gone if replacement_for(k) is None)
    migration, data = migrate(tmp_path, {"model": "m", key: 1}, source, target)
    assert data == {"model": "m"}
    (change,) = migration.changes
    assert change.action == "removed" and "nothing replaces it" in change.detail


def test_a_key_only_newer_releases_have_is_left_when_going_back(tmp_path):
    newer = next(k for k in load_schema(NEWEST).fields if releases_with(k)[0] != bundled_versions()[0])
    older = bundled_versions()[0]
    migration, data = migrate(tmp_path, {"model": "m", newer: None}, NEWEST, older)
    assert data == {"model": "m", newer: None}
    assert actions(migration) == {newer: "manual"} and migration.fix is None


def test_a_typo_is_left_to_validate(tmp_path):
    migration, data = migrate(tmp_path, {"model": "m", "max_modle_len": 5}, NEWEST, NEWEST)
    assert migration.changes == [] and migration.fix is None and data == {"model": "m", "max_modle_len": 5}


# -- the rest of a migration ---------------------------------------------------------------------------------------


def test_defaults_that_change_are_listed_only_for_keys_the_file_does_not_set():
    source, target = load_schema(bundled_versions()[0]), load_schema(NEWEST)
    listed = changed_defaults({}, source, target)
    assert listed
    for change in listed:
        assert source.fields[change.key].default == change.old and target.fields[change.key].default == change.new
        assert change.old != change.new
    first = listed[0].key
    assert first not in {c.key for c in changed_defaults({first: 1}, source, target)}
    assert changed_defaults({}, target, target) == []


def test_the_source_release_is_the_newest_that_knows_every_key():
    key = "disable_log_requests"
    source, why = written_for({"model": "m", key: True}, NEWEST)
    assert source == last_with(key) and "every key" in why
    assert written_for({"model": "m"}, NEWEST)[0] == NEWEST


def test_a_key_no_release_knows_is_named_in_the_reason_not_counted_as_known():
    key = "disable_log_requests"
    source, why = written_for({"model": "m", key: True, "gpu_memory_utilisation": 0.9}, NEWEST)
    assert source == last_with(key)  # the typo does not move the release
    assert "every key" not in why
    assert "every other key" in why and "'gpu_memory_utilisation' no release knows" in why


def test_removing_any_set_of_keys_leaves_valid_json_in_the_same_order(tmp_path):
    text = '{\n  "a": 1,\n  "b": {"x": [1, 2]},\n  "c": "s",\n  "d": true\n}\n'
    path = tmp_path / "model.json"
    path.write_text(text)
    doc = JsonDocument.load(path)
    for size in range(5):
        for keys in itertools.combinations("abcd", size):
            new = text
            for edit in sorted(remove_json_keys(doc, keys), key=lambda e: e.span.start, reverse=True):
                new = new[: edit.span.start] + edit.text + new[edit.span.end :]
            assert list(json.loads(new)) == [k for k in "abcd" if k not in keys], (keys, new)
            assert ('"a": 1,' in new) == ("a" not in keys and set("bcd") - set(keys) != set())


def test_the_target_comes_from_a_release_or_a_container():
    assert resolve_target("0.32", None)[0] == "0.32.0"
    newest = RELEASES[0]
    target, why = resolve_target(None, newest.release)
    assert release_key(target) <= release_key(newest.vllm.split("rc")[0]) and newest.image in why
    for to, container in ((None, None), ("0.32.0", newest.release), (None, "99.99")):
        with pytest.raises(UsageError):
            resolve_target(to, container)


# -- the command ---------------------------------------------------------------------------------------------------


def test_upgrade_writes_the_files_and_validate_is_clean_for_the_target(tmp_path):
    key = "disable_log_requests"
    target = first_without(key)
    path = write_model(tmp_path, {"model": "facebook/opt-125m", key: True, "enforce_eager": True})
    result = upgrade_paths([tmp_path], to=target)
    assert json.loads(path.read_text()) == {
        "model": "facebook/opt-125m",
        "enable_log_requests": False,
        "enforce_eager": True,
    }
    assert not result.remaining.has_errors and not result.needs_user
    again = upgrade_paths([tmp_path], to=target)
    assert not again.plan.changes  # a second run has nothing to do


def test_the_cli_diff_writes_nothing_and_a_manual_change_exits_1(tmp_path):
    path = write_model(tmp_path, {"model": "m", "disable_log_requests": True})
    before = path.read_bytes()
    runner = CliRunner()
    done = runner.invoke(build_app(), ["upgrade", str(tmp_path), "--to", NEWEST, "--diff"])
    assert done.exit_code == 0, done.output
    assert '+    "enable_log_requests": false' in done.stdout and path.read_bytes() == before
    path.write_text(json.dumps({"model": "m", "task": "embed"}))
    done = runner.invoke(build_app(), ["upgrade", str(tmp_path), "--to", first_without("task")])
    assert done.exit_code == 1 and "left for you task" in done.output, done.output
    done = runner.invoke(build_app(), ["upgrade", str(tmp_path)])
    assert done.exit_code == 2 and "--to" in done.output


def test_a_file_that_does_not_parse_is_not_touched(tmp_path):
    path = write_model(tmp_path, '{"model": "m", "disable_log_requests": true,}')
    before = path.read_bytes()
    result = upgrade_paths([tmp_path], to=NEWEST)
    assert path.read_bytes() == before
    assert [p for p, _ in result.skipped] == [path]
