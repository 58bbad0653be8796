"""validate --fix: what has one right answer is rewritten in place (nothing else in the file changes), --diff shows it
without writing, what has no single answer is left for the user, and the exit code says whether errors remain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.repo_builder import VERSION
from vllm_repo.schema.loader import load_schema
from vllm_repo.validate import fix_paths

CONFIG = """# the chat model
name: "chat-old"   # renamed directory
backend: "vllm"
max_batch_size: 8
model_transaction_policy {
  decoupled: False  # streaming needs true
}
"""
# Formatting a tool would not write: two-space and tab indentation, keys out of order, an odd spacing.
ENGINE_ARGS = (
    '{\n  "model": "Qwen/Qwen2.5-0.5B-Instruct",\n\t"dtype" :  "bf16",\n  "gpu_memory_utilization": "0.5",\n'
    '  "enforce_eager": "true",\n  "max_model_len": "8k"\n}\n'
)


def write_repo(root: Path) -> Path:
    model = root / "repo" / "chat"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.json").write_text(ENGINE_ARGS)
    return root / "repo"


def test_fix_rewrites_only_what_has_one_answer_and_keeps_the_rest(tmp_path):
    repo = write_repo(tmp_path)
    plan, after = fix_paths([repo], vllm_version=VERSION)
    codes = sorted(d.code for d, _ in plan.applied)
    assert codes == ["VR202", "VR204", "VR205", "VR303", "VR303", "VR304"]
    engine_args = (repo / "chat" / "1" / "model.json").read_text()
    assert engine_args == ENGINE_ARGS.replace('"bf16"', '"bfloat16"').replace('"0.5"', "0.5").replace(
        '"true"', "true"
    )  # byte for byte: only the values changed
    assert json.loads(engine_args)["max_model_len"] == "8k"  # 8192 or 8000? not one answer: left, and reported
    config = (repo / "chat" / "config.pbtxt").read_text()
    assert config == CONFIG.replace('"chat-old"', '"chat"').replace("8", "0", 1).replace("False", "true")
    assert [d.code for d in after.diagnostics if d.severity.value == "error"] == ["VR303"]


def test_diff_shows_the_fixes_and_writes_nothing(tmp_path):
    repo = write_repo(tmp_path)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--diff", "--vllm-version", VERSION, str(repo)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert '-\t"dtype" :  "bf16",' in done.stdout and '+\t"dtype" :  "bfloat16",' in done.stdout
    assert "+  decoupled: true  # streaming needs true" in done.stdout
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before
    # Beside the patch: what --fix would leave ("8k" has no one answer), and the summary; nothing it would fix.
    assert "--fix would change 2 files; what it would leave:" in done.stderr
    assert "max_model_len" in done.stderr and "VR304" not in done.stderr
    assert "1 error(s)" in done.stderr and "error[" not in done.stdout  # stdout: the patch alone


def test_diff_with_nothing_to_fix_still_shows_the_findings_and_exits_by_them(tmp_path):
    repo = tmp_path / "repo"
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text('backend: "vllm"\n')
    (repo / "llm" / "1" / "model.json").write_text('{"model": "m", "max_model_len": "8k"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--diff", "--vllm-version", VERSION, str(repo)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "nothing for --fix to change" in done.stderr and "VR303" in done.stderr and "1 error(s)" in done.stderr


def test_the_cli_reports_each_fix_and_exits_by_what_is_left(tmp_path):
    repo = write_repo(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--fix", "--vllm-version", VERSION, str(repo)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1  # "8k" is still an error
    assert "fixed " in done.stderr and '[VR304] write "bfloat16"' in done.stderr
    assert "max_model_len" in done.stdout and "VR304" not in done.stdout
    model_json = repo / "chat" / "1" / "model.json"
    model_json.write_text(model_json.read_text().replace('"8k"', "8192"))
    again = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--fix", "--vllm-version", VERSION, str(repo)],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "fixed " not in again.stderr, again.stdout + again.stderr


def test_a_renamed_engine_argument_takes_its_new_name(tmp_path):
    from vllm_repo.schema.history import CURATED, releases_with

    plain = [
        (old, r.new)
        for old, r in CURATED.items()
        if not r.how and old not in load_schema(VERSION).fields and r.new in load_schema(VERSION).fields
    ]
    assert plain, "the key history names no plain rename for this release"
    old, new = plain[0]
    assert releases_with(old)  # a key some bundled release has
    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text(json.dumps({"model": "m", old: None}, indent=2))
    plan, after = fix_paths([model], vllm_version=VERSION)
    assert [d.code for d, _ in plan.applied] == ["VR302"]
    assert set(json.loads((model / "1" / "model.json").read_text())) == {"model", new}
    assert not after.has_errors


def test_keys_with_no_single_answer_and_unparsable_files_are_left_alone(tmp_path):
    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\nmax_batch_size: 4\nunknown_field: 1\n')  # does not parse
    text = '{"model": "m", "dtype": "bf-sixteen", "gpu_memory_utilisation": 0.5, "task": "embed"}'
    (model / "1" / "model.json").write_text(text)
    plan, _ = fix_paths([model], vllm_version=VERSION)
    assert plan.applied == [] and plan.texts == {}
    assert (model / "1" / "model.json").read_text() == text  # a guess, a typo, a choice to make: the user's call
    assert "unknown_field" in (model / "config.pbtxt").read_text()


def test_a_removed_key_with_one_right_value_for_the_release_is_migrated_by_its_value_table(tmp_path):
    from vllm_repo.schema.history import replacement_for

    assert "disable_log_requests" not in load_schema(VERSION).fields
    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    text = '{\n  "model": "m",\n  "disable_log_requests": "true",\n  "disable_mm_preprocessor_cache": false\n}\n'
    (model / "1" / "model.json").write_text(text)
    plan, after = fix_paths([model], vllm_version=VERSION)
    assert [d.code for d, _ in plan.applied] == ["VR302", "VR302"]
    written = json.loads((model / "1" / "model.json").read_text())
    # The meaning is kept: requests were not logged, and the cache stays on (false was the default).
    assert written == {"model": "m", "enable_log_requests": replacement_for("disable_log_requests").carried(True)[1]}
    assert written["enable_log_requests"] is False
    assert not after.has_errors


def test_files_in_the_wrong_place_or_under_a_misspelled_name_are_moved_never_over_another(tmp_path):
    repo = tmp_path / "repo"
    beside = repo / "beside"
    beside.mkdir(parents=True)
    (beside / "config.pbtxt").write_text('backend: "vllm"\n')
    # Three models on one GPU: each takes 0.3 of it, so the GPU-sharing check has nothing to say.
    (beside / "model.json").write_text('{"model": "m", "dtype": "bf16", "gpu_memory_utilization": 0.3}\n')
    misspelled = repo / "misspelled"
    (misspelled / "1").mkdir(parents=True)
    (misspelled / "config.pbtxt").write_text('backend: "vllm"\n')
    (misspelled / "1" / "models.json").write_text('{"model": "m", "gpu_memory_utilization": 0.3}\n')
    lone = repo / "lone"
    (lone / "1").mkdir(parents=True)
    (lone / "config.pbtxt").write_text('backend: "vllm"\n')
    (lone / "1" / "engine.json").write_text(
        '{"model": "m", "gpu_memory_utilization": 0.3}\n'
    )  # not a misspelling: which file is meant is a guess

    diff = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--diff", "--vllm-version", VERSION, str(repo)],
        capture_output=True,
        text=True,
    )
    assert "rename from" in diff.stdout and "models.json" in diff.stdout and (misspelled / "1" / "models.json").exists()

    plan, after = fix_paths([repo], vllm_version=VERSION)
    assert sorted(d.code for d, _ in plan.applied) == ["VR103", "VR104", "VR304"]
    assert json.loads((beside / "1" / "model.json").read_text())["dtype"] == "bfloat16"
    assert not (beside / "model.json").exists()
    assert (misspelled / "1" / "model.json").read_text() == '{"model": "m", "gpu_memory_utilization": 0.3}\n'
    assert (lone / "1" / "engine.json").exists() and not (lone / "1" / "model.json").exists()
    assert {d.code for d in after.diagnostics if d.severity.value == "error"} == {"VR104"}  # only the lone guess

    # A misplaced file whose target exists is left where it is: the user decides which one is right.
    (beside / "model.json").write_text('{"model": "other"}\n')
    plan, _ = fix_paths([repo], vllm_version=VERSION)
    assert not plan.moves and (beside / "model.json").exists()


def test_the_name_fix_edits_the_models_name_not_an_inputs(tmp_path):
    model = tmp_path / "chat"
    (model / "1").mkdir(parents=True)
    config = 'input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]\nbackend: "vllm"\nname: "old"\n'
    (model / "config.pbtxt").write_text(config)
    (model / "1" / "model.json").write_text('{"model": "m"}\n')
    plan, _ = fix_paths([model], vllm_version=VERSION)
    assert [d.code for d, _ in plan.applied] == ["VR202"]
    assert (model / "config.pbtxt").read_text() == config.replace('name: "old"', 'name: "chat"')


def test_a_fixed_file_keeps_its_permissions(tmp_path):
    import stat

    repo = write_repo(tmp_path)
    model_json = repo / "chat" / "1" / "model.json"
    model_json.chmod(0o640)
    fix_paths([repo], vllm_version=VERSION)
    assert '"bfloat16"' in model_json.read_text() and stat.S_IMODE(model_json.stat().st_mode) == 0o640


def test_fix_goes_on_until_nothing_changes_a_moved_file_is_checked_and_fixed_in_the_same_run(tmp_path):
    # models.json is not read as engine arguments until it is model.json: its removed key shows only then.
    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "models.json").write_text('{\n  "model": "m",\n  "disable_log_requests": true\n}\n')
    plan, after = fix_paths([model], vllm_version=VERSION)
    assert sorted(d.code for d, _ in plan.applied) == ["VR104", "VR302"]
    assert json.loads((model / "1" / "model.json").read_text()) == {"model": "m", "enable_log_requests": False}
    assert not after.has_errors and not after.diagnostics
    again, _ = fix_paths([model], vllm_version=VERSION)
    assert not again.changes  # nothing left for a second run

    # The same from the command line: one run, both fixes reported, nothing left.
    (model / "1" / "model.json").rename(model / "1" / "models.json")
    (model / "1" / "models.json").write_text('{\n  "model": "m",\n  "disable_log_requests": true\n}\n')
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "--fix", "--vllm-version", VERSION, str(model)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[VR104]" in done.stderr and "[VR302]" in done.stderr and "stopped after" not in done.stderr


def test_fix_stops_after_a_bounded_number_of_passes_and_says_so(tmp_path, monkeypatch):
    # Two fixes that undo each other never converge: the run ends, and says it did not settle.
    from vllm_repo.validate import runner

    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text('{"model": "m", "dtype": "bf16"}\n')
    real_plan = runner.plan

    def flip(fixes):
        result = real_plan(fixes)
        path = model / "1" / "model.json"
        text = path.read_text()
        result.texts[path] = (text, text.replace("bfloat16", "bf16") if "bfloat16" in text else text)
        return result

    monkeypatch.setattr(runner, "plan", flip)
    plan, _ = fix_paths([model], vllm_version=VERSION)
    assert plan.passes == runner.MAX_FIX_PASSES and not plan.converged
