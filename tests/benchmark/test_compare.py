"""bench --compare without servers: what is compared and refused, the rounds' order, the ratios and the same-work
check from made-up records, the report's text and plot, and Ctrl-C keeping what was measured."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from vllm_repo.benchmark import compare as compare_mod
from vllm_repo.benchmark.compare import (
    CompareRun,
    CompareSpec,
    Contender,
    Measured,
    launches,
    parse_contenders,
    plan_servers,
    round_order,
)
from vllm_repo.benchmark.compare_report import to_text
from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.output import svg
from vllm_repo.benchmark.run import BenchSpec
from vllm_repo.benchmark.stats import RequestRecord
from vllm_repo.benchmark.vllm_serve import engine_cli_args, require_vllm, serve_args_for
from vllm_repo.errors import UsageError
from vllm_repo.serve.python_env import PythonInfo

CONFIG = 'backend: "vllm"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'


def write_model(repo: Path, name: str, engine_args: dict, config: str = CONFIG) -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    (model / "1" / "model.json").write_text(json.dumps(engine_args))
    return model


# ---------------------------------------------------------------------------------------------------------------------
# What is compared, and what vllm serve is given
# ---------------------------------------------------------------------------------------------------------------------


def test_contenders_are_vllm_serve_and_backend_directories_and_nothing_else():
    found = parse_contenders(["vllm-serve,backend=/opt/tritonserver/backends/vllm", "backend=/old"])
    assert [c.name for c in found] == ["vllm-serve", "backend=/opt/tritonserver/backends/vllm", "backend=/old"]
    for bad in (["vllm"], ["backend="], [""], ["vllm-serve,vllm-serve"]):
        with pytest.raises(UsageError):
            parse_contenders(bad)


def test_model_json_becomes_vllm_serves_command_line_with_the_triton_models_name(tmp_path):
    write_model(
        tmp_path,
        "llm",
        {
            "model": "/models/m",
            "served_model_name": "other",
            "max_model_len": 512,
            "enforce_eager": True,
            "disable_log_stats": False,  # vLLM's default, and a plain switch: no --no- form to give
            "enable_prefix_caching": False,  # on by default: given as --no-enable-prefix-caching
            "compilation_config": {"level": 0},
            "cudagraph_capture_sizes": [1, 2, 4],
        },
    )
    (tmp_path / "llm" / "1" / "openai.json").write_text(json.dumps({"max_log_len": 10, "served_model_name": "x"}))
    args = serve_args_for(tmp_path, None, "0.32.0+cpu")
    assert args.checked_against == "0.32.0"
    assert args.args() == [
        "--model", "/models/m", "--served-model-name", "llm", "--max-model-len", "512", "--enforce-eager",
        "--no-enable-prefix-caching", "--compilation-config", '{"level": 0}', "--cudagraph-capture-sizes", "1", "2",
        "4", "--max-log-len", "10",
    ]  # fmt: skip


def test_engine_cli_args_leaves_none_out_and_writes_dicts_as_json():
    assert engine_cli_args({"a_b": None, "c": {"x": [1]}, "d": [{"k": 1}], "e": 0.5}) == [
        "--c", '{"x": [1]}', "--d", '[{"k": 1}]', "--e", "0.5",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("ensemble", "is an ensemble"),
        ("python", "served by the python backend"),
        ("two models", "holds 2 models (a, b)"),
        ("two instances", "2 instances"),
        ("unknown key", "model.json's key 'not_a_vllm_key' has no vllm serve flag in vLLM 0.32.0"),
    ],
)
def test_what_vllm_serve_cannot_express_is_refused_with_the_reason(tmp_path, setup, words):
    engine = {"model": "/models/m"}
    if setup == "ensemble":
        write_model(tmp_path, "a", engine, 'platform: "ensemble"\n')
    elif setup == "python":
        write_model(tmp_path, "a", engine, 'backend: "python"\n')
    elif setup == "two models":
        write_model(tmp_path, "a", engine)
        write_model(tmp_path, "b", engine)
    elif setup == "two instances":
        write_model(tmp_path, "a", engine, CONFIG + "instance_group [ { count: 2 kind: KIND_MODEL } ]\n")
    else:
        write_model(tmp_path, "a", {**engine, "not_a_vllm_key": 1})
    with pytest.raises(BenchError) as raised:
        serve_args_for(tmp_path, None, "0.32.0")
    assert "vllm serve cannot serve what Triton serves here" in str(raised.value)
    assert words in str(raised.value)


def test_a_serving_python_without_vllm_is_named_with_how_to_install_it():
    info = PythonInfo(Path("/venv/bin/python"), "3.11", Path("/usr/lib"), "1.26.4", None)
    with pytest.raises(BenchError) as raised:
        require_vllm(info)
    assert "/venv/bin/python (the serving Python) has no vLLM" in str(raised.value)
    assert "/venv/bin/python -m pip install vllm" in str(raised.value.hint)


# ---------------------------------------------------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------------------------------------------------


def test_rounds_alternate_and_one_at_a_time_a_server_stays_loaded_across_a_round_boundary():
    order = round_order(["triton", "vllm-serve"], 3)
    assert order == [["triton", "vllm-serve"], ["vllm-serve", "triton"], ["triton", "vllm-serve"]]
    assert launches(order, together=False) == [
        [(0, "triton")],
        [(0, "vllm-serve"), (1, "vllm-serve")],
        [(1, "triton"), (2, "triton")],
        [(2, "vllm-serve")],
    ]
    assert len(launches(order, together=True)) == 1


def test_triton_is_measured_natively_and_through_the_gateway_and_a_foreign_backend_natively(tmp_path):
    (tmp_path / "model.py").write_text("")
    spec = CompareSpec([Contender("vllm-serve"), Contender("backend", tmp_path)])
    sides = [(s.name, s.endpoint) for server in plan_servers(spec) for s in server.sides]
    assert sides == [
        ("triton native", "native"),
        ("triton openai", "openai"),
        ("vllm-serve", "openai"),
        (f"backend={tmp_path} native", "native"),
    ]
    assert spec.reference() == "vllm-serve"
    assert CompareSpec([Contender("backend", tmp_path)]).reference() == f"backend={tmp_path}"


def test_together_is_refused_where_the_engines_do_not_fit_a_gpu(tmp_path, monkeypatch):
    write_model(tmp_path, "a", {"model": "/m", "gpu_memory_utilization": 0.6})
    monkeypatch.setattr("vllm_repo.serve.launch_plan.has_nvidia_gpu", lambda: True)
    with pytest.raises(BenchError, match=r"claim 1\.20 of each GPU"):
        compare_mod.placement(tmp_path, "a", True, 2)
    assert compare_mod.placement(tmp_path, "a", False, 2)[0] is False
    (tmp_path / "a" / "1" / "model.json").write_text(json.dumps({"model": "/m", "gpu_memory_utilization": 0.45}))
    assert compare_mod.placement(tmp_path, "a", True, 2)[0] is True


# ---------------------------------------------------------------------------------------------------------------------
# The comparison from made-up measurements
# ---------------------------------------------------------------------------------------------------------------------


def record(tokens: int = 8, inputs: int = 32, ttft: float = 0.01) -> RequestRecord:
    itl = [0.001] * (tokens - 1)
    return RequestRecord(0.0, True, ttft, itl, ttft + 0.05, output_tokens=tokens, input_tokens=inputs)


def made_up_run(walls: dict[str, list[float]], tokens: dict[str, int] | None = None) -> CompareRun:
    """Two load points, rounds as many as ``walls`` gives; side name -> each round's wall time (both points)."""
    spec = BenchSpec(model="tiny", concurrency=[1, 2], num_prompts=2, input_len=32, output_len=8)
    compare = CompareSpec([Contender("vllm-serve")], rounds=len(next(iter(walls.values()))))
    run = CompareRun(spec, compare, plan_servers(CompareSpec(compare.contenders, endpoints=["native"])))
    run.order = round_order(["triton", "vllm-serve"], compare.rounds)
    run.placement = "one at a time"
    run.setup = {"vllm": "0.32.0", "gpu": "none"}
    for side in run.sides:
        n = (tokens or {}).get(side.name, 8)
        side.rounds = [[Measured([record(n), record(n)], wall) for _ in range(2)] for wall in walls[side.name]]
    return run


def test_ratios_are_the_median_of_per_round_ratios_with_their_range():
    run = made_up_run({"triton native": [1.0, 2.0, 1.0], "vllm-serve": [1.0, 1.0, 2.0]})
    report = run.report()
    comparison = report["comparison"]
    assert comparison["reference"] == "vllm-serve"
    rounds = {s["name"]: s["rounds"] for s in comparison["sides"]}
    for i, point in enumerate(comparison["points"]):
        throughput = point["ratios"]["triton native"]["output_tokens_per_s"]
        # Round by round, each side's figure of that round over the reference's of the same round.
        ours, theirs = rounds["triton native"], rounds["vllm-serve"]
        expected = [round(ours[r][i]["output_tokens_per_s"] / theirs[r][i]["output_tokens_per_s"], 4) for r in range(3)]
        assert throughput["rounds"] == expected == [1.0, 0.5, 2.0]
        assert throughput["median"] == statistics.median(expected) and (throughput["min"], throughput["max"]) == (
            0.5,
            2,
        )
        assert point["same_work"] is True and point["requests_compared"] == 6
    # The top-level points are Triton's first side, over all rounds' requests.
    assert report["points"][0]["completed"] == 6 and report["points"][0]["rounds"] == 3
    text = to_text(report)
    assert "1.000 (0.50-2.00)" in text and "1 (reference)" in text and "same work on every side: yes" in text


def test_different_token_counts_are_not_the_same_work_and_are_listed():
    run = made_up_run({"triton native": [1.0], "vllm-serve": [1.0]}, tokens={"vllm-serve": 7})
    point = run.report()["comparison"]["points"][0]
    assert point["same_work"] is False and point["mismatched"] == 2
    assert point["mismatches"][0] == {
        "side": "triton native", "round": 1, "request": 0, "input_tokens": [32, 32], "output_tokens": [8, 7],
    }  # fmt: skip
    assert "same work on every side: NO (2 mismatched" in to_text(run.report())


def test_the_plot_has_one_line_per_side_in_each_panel():
    drawing = svg(made_up_run({"triton native": [1.0], "vllm-serve": [2.0]}).report())
    assert drawing.count("<polyline") == 3 * 2 * 2  # panels x sides x (p50, p99)
    assert ">triton native</text>" in drawing and ">vllm-serve</text>" in drawing


def test_ctrl_c_stops_every_server_and_keeps_the_rounds_measured(tmp_path, monkeypatch):
    write_model(tmp_path, "tiny", {"model": "/m"})
    visited: list[str] = []

    def session(server, ctx, work):  # stands in for a launch: measures one point, or is interrupted
        visited.append(server.name)
        if len(visited) == 3:
            raise KeyboardInterrupt
        for side in server.sides:
            side.rounds[len(visited) // 3].append(Measured([record(), record()], 1.0))

    monkeypatch.setattr(compare_mod, "_triton_session", session)
    monkeypatch.setattr(compare_mod, "_vllm_serve_session", session)
    info = PythonInfo(Path("/venv/bin/python"), "3.11", Path("/usr/lib"), "1.26.4", "0.32.0")
    monkeypatch.setattr("vllm_repo.serve.python_env.probe_python", lambda path: info)
    monkeypatch.setattr("vllm_repo.serve.python_env.serving_python_path", lambda python: Path("/venv/bin/python"))
    spec = BenchSpec(model="", concurrency=[1, 2], num_prompts=2)
    run = compare_mod.compare_repository(
        tmp_path, spec, CompareSpec([Contender("vllm-serve")], rounds=2, endpoints=["native"])
    )
    assert visited == ["triton", "vllm-serve", "triton"] and run.interrupted and not run.finished
    report = run.report()
    assert report["interrupted"] is True and report["comparison"]["points"][0]["requests_compared"] == 2
    assert "interrupted" in to_text(report)


def test_a_port_taken_is_refused_before_vllm_serve_starts(tmp_path):
    import socket

    from vllm_repo.benchmark.vllm_serve import ServeArgs, VllmServe

    info = PythonInfo(Path("/venv/bin/python"), "3.11", Path("/usr/lib"), "1.26.4", "0.32.0")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = VllmServe(info, ServeArgs("tiny", {"model": "/m"}, {}, None), taken.getsockname()[1])
        with pytest.raises(BenchError, match="is in use"):
            server.start()
    assert server.process is None


def test_the_docs_page_names_every_key_of_the_comparison():
    from vllm_repo.benchmark.compare_report import RATIO_FIGURES

    text = (Path(__file__).resolve().parents[2] / "docs" / "bench.md").read_text()
    comparison = made_up_run({"triton native": [1.0], "vllm-serve": [1.0]}).report()["comparison"]
    keys = set(comparison) | set(comparison["points"][0]) | set(comparison["sides"][0]) | set(RATIO_FIGURES)
    assert {k for k in keys if f"`{k}`" not in text} <= {"concurrency"}


def test_a_model_path_relative_to_here_is_given_to_vllm_serve_whole(tmp_path, monkeypatch):
    (tmp_path / "weights" / "m").mkdir(parents=True)
    write_model(tmp_path / "repo", "llm", {"model": "weights/m"})
    monkeypatch.chdir(tmp_path)
    assert serve_args_for(tmp_path / "repo", "llm", "0.32.0").args()[:2] == ["--model", str(tmp_path / "weights" / "m")]


def test_a_repository_of_several_models_is_compared_on_the_model_named(tmp_path):
    write_model(tmp_path, "a", {"model": "/models/a"})
    write_model(tmp_path, "b", {"model": "/models/b"})
    with pytest.raises(BenchError, match=r"holds 2 models \(a, b\)") as raised:
        serve_args_for(tmp_path, None, "0.32.0")
    assert "name one with --model" in str(raised.value.hint)
    assert serve_args_for(tmp_path, "b", "0.32.0").args()[:4] == ["--model", "/models/b", "--served-model-name", "b"]


def test_each_load_point_can_send_its_own_number_of_requests_and_no_prompt_twice():
    spec = BenchSpec(model="m", concurrency=[1, 32, 128], prompts_per_point=[4, 64, 256], warmup=2)
    prompts = [f"p{i}" for i in range(compare_mod.prompts_needed(spec, rounds=3))]
    assert len(prompts) == 2 + 3 * (4 + 64 + 256)
    taken = [compare_mod.prompts_of(spec, prompts, r, point) for r in range(3) for point in range(3)]
    assert [len(chosen) for chosen in taken] == [4, 64, 256] * 3
    flat = [p for chosen in taken for p in chosen]
    assert len(set(flat)) == len(flat) and not set(flat) & set(prompts[:2])  # none twice, none of the warm-up's
    with pytest.raises(BenchError, match="3 numbers for 2 load points"):
        BenchSpec(model="m", concurrency=[1, 32], prompts_per_point=[1, 2, 3]).check()


def test_compare_measures_each_endpoint_named_and_bench_alone_takes_one(tmp_path):
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app

    spec = CompareSpec([Contender("vllm-serve")], endpoints=["native", "openai-chat"])
    sides = [(s.name, s.endpoint) for server in plan_servers(spec) for s in server.sides]
    assert sides == [("triton native", "native"), ("triton openai-chat", "openai-chat"), ("vllm-serve", "openai-chat")]
    result = CliRunner().invoke(build_app(), ["bench", str(tmp_path), "--endpoint", "native", "--endpoint", "openai"])
    assert result.exit_code == 2 and "one --endpoint at a time" in result.output
    result = CliRunner().invoke(build_app(), ["bench", str(tmp_path), "--concurrency", "1,2", "--num-prompts", "1,2,3"])
    assert result.exit_code != 0 and "3 numbers for 2 load points" in result.output


def test_a_chat_template_s_input_tokens_are_not_a_difference_in_work_but_output_tokens_are():
    spec = BenchSpec(model="tiny", concurrency=[1], num_prompts=2, input_len=32, output_len=8)
    compare = CompareSpec([Contender("vllm-serve")], endpoints=["native", "openai-chat"])
    run = CompareRun(spec, compare, plan_servers(compare))
    run.order, run.placement, run.setup = round_order(["triton", "vllm-serve"], 1), "together", {"gpu": "none"}
    # vllm serve's chat requests count the template's tokens too; native counts the prompt alone.
    counts = {"triton native": (32, 8), "triton openai-chat": (46, 8), "vllm-serve": (46, 8)}
    for side in run.sides:
        inputs, tokens = counts[side.name]
        side.rounds = [[Measured([record(tokens, inputs), record(tokens, inputs)], 1.0)]]
    assert run.report()["comparison"]["points"][0]["same_work"] is True
    run.sides[0].rounds = [[Measured([record(7, 32), record(8, 32)], 1.0)]]  # one answer a token short
    point = run.report()["comparison"]["points"][0]
    assert point["same_work"] is False and point["mismatched"] == 1


def test_a_client_busy_enough_to_be_the_limit_is_said_beside_its_figures():
    run = made_up_run({"triton native": [1.0, 1.0], "vllm-serve": [1.0, 1.0]})
    for side in run.sides:
        for rounds in side.rounds:
            rounds[1].client_cpu_s_per_s = 0.4
    run.sides[-1].rounds[1][1].client_cpu_s_per_s = 0.97  # vllm serve's client, round 2, concurrency 2
    report = run.report()
    points = {s["name"]: s["points"] for s in report["comparison"]["sides"]}
    assert points["vllm-serve"][1]["client_cpu_s_per_s"] == 0.97  # the busiest round
    assert points["triton native"][1]["client_cpu_s_per_s"] == 0.4
    notes = [line for line in to_text(report).splitlines() if line.startswith("note: at concurrency")]
    assert notes == [
        "note: at concurrency 2, vllm-serve's client took 0.97 CPU-seconds a second: one core of the client may be "
        "what limits these figures, not the server (run the load from more processes or a faster machine)"
    ]


def test_a_server_s_cpu_is_pooled_over_its_rounds_by_their_wall_time_and_said_by_role():
    run = made_up_run({"triton native": [1.0, 3.0], "vllm-serve": [2.0, 2.0]})
    triton, serve = run.sides
    triton.rounds[0][1].server_cpu = {"tritonserver": 1.0, "EngineCore": 1.0}
    triton.rounds[1][1].server_cpu = {"tritonserver": 2.0, "EngineCore": 1.0, "Python backend stub": 0.004}
    serve.rounds[0][1].server_cpu = serve.rounds[1][1].server_cpu = {"vllm serve API server": 0.8, "EngineCore": 1.0}
    report = run.report()
    points = {s["name"]: s["points"] for s in report["comparison"]["sides"]}
    # Round 2 ran three times as long as round 1: its 2.0 weighs three times as much.
    assert points["triton native"][1]["server_cpu_by_role"] == {
        "tritonserver": 1.75,
        "EngineCore": 1.0,
        "Python backend stub": 0.003,
    }
    assert points["triton native"][1]["server_cpu_s_per_s"] == 2.753
    assert points["vllm-serve"][1]["server_cpu_s_per_s"] == 1.8
    assert points["triton native"][0]["server_cpu_by_role"] == {}  # not measured there
    lines = [line for line in to_text(report).splitlines() if line.startswith("server CPU-s/s")]
    assert lines == [  # one line a side where it was measured, roles under 0.01 left out
        "server CPU-s/s, triton native: 2.75 (tritonserver 1.75, EngineCore 1.00)",
        "server CPU-s/s, vllm-serve: 1.80 (EngineCore 1.00, vllm serve API server 0.80)",
    ]
