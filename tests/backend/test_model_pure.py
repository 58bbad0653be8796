"""The backend's pure parts: parsing, device planning, output assembly, send threads. No Triton, no vLLM."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from vllm_repo.backend import model as backend
from vllm_repo.backend.vllm_repo_backend import (
    configuration,
    contract,
    environment,
    errors,
    jobs,
    native,
    openai_app,
    sends,
    stub,
)

# A stand-in for vLLM's SamplingParams field list (the real one is read from vLLM at initialize).
SAMPLING_KEYS = [
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "detokenize",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
    "output_kind",
    "structured_outputs",
    "logit_bias",
    "allowed_token_ids",
    "bad_words",
    "skip_clone",
]


def parse(sampling=None, request_params=None, default_max_tokens=None):
    return native.parse_sampling_parameters(
        json.dumps(sampling) if isinstance(sampling, dict) else sampling,
        json.dumps(request_params) if isinstance(request_params, dict) else request_params,
        SAMPLING_KEYS,
        default_max_tokens,
    )


# -- the package beside model.py ------------------------------------------------------------------------------------


def test_the_bundled_serve_options_were_read_where_the_backend_looks_for_vllm_serves_parser():
    from vllm_repo.schema.serve_options import bundled_serve_options

    # One list for both (contract.SERVE_PARSER_MODULES): 0.33 keeps the parser in entrypoints.common, 0.29-0.32 in
    # entrypoints.launchers, older releases in entrypoints.openai, and a release of each era is bundled.
    assert [m.split(".")[2] for m in contract.SERVE_PARSER_MODULES] == ["common", "launchers", "openai"]
    assert {"0.26.0", "0.29.0", "0.33.0"} <= set(bundled_serve_options())


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file: level 0 absolute, 1 relative to its package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def test_model_py_takes_its_package_by_the_packages_own_name_and_nothing_of_vllm_repo():
    imports = _imports(Path(backend.__file__))
    # By name where Triton's stub loads model.py; relatively where vllm-repo imports it as vllm_repo.backend.model.
    assert (0, "vllm_repo_backend") in imports and (1, "vllm_repo_backend") in imports
    assert not [m for _, m in imports if m.startswith(("vllm_repo.", "utils"))], imports
    assert backend.native.__name__ == "vllm_repo.backend.vllm_repo_backend.native"  # one copy when vllm-repo imports it


def test_the_packages_modules_import_each_other_relatively_and_the_contract_only_the_standard_library():
    package = Path(contract.__file__).parent
    for path in package.glob("*.py"):
        absolute = {module.split(".")[0] for level, module in _imports(path) if level == 0}
        # Copied out of vllm-repo, the package is vllm_repo_backend: an absolute name of its own would not resolve.
        assert not absolute & {"vllm_repo", "vllm_repo_backend", "utils"}, (path.name, absolute)
    stdlib = {module.split(".")[0] for level, module in _imports(package / "contract.py") if level == 0}
    assert stdlib <= set(sys.stdlib_module_names) | {"__future__"}, stdlib


# -- booleans and config parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, np.bool_(True), "true", "TRUE", " yes ", "1", "on", b"true", 1])
def test_parse_bool_true(value):
    assert native.parse_bool(value, "f") is True


@pytest.mark.parametrize("value", [False, np.bool_(False), "false", "False", "0", "no", "off", b"false", 0])
def test_parse_bool_false(value):
    assert native.parse_bool(value, "f") is False


@pytest.mark.parametrize("value", ["maybe", "", 2, 0.5, None, [True]])
def test_parse_bool_rejects_other_values_naming_the_field(value):
    with pytest.raises(errors.RequestError, match=r"^stream: .*not a boolean"):
        native.parse_bool(value, "stream")


def test_config_parameters_booleans_integers_and_errors():
    cfg = {
        "parameters": {
            "REPORT_CUSTOM_METRICS": {"string_value": "false"},
            "DEFAULT_MAX_TOKENS": {"string_value": "256"},
        }
    }
    params = configuration.config_parameters(cfg)
    assert configuration.bool_parameter(params, "REPORT_CUSTOM_METRICS") is False
    assert configuration.bool_parameter(params, "ENABLE_VLLM_HEALTH_CHECK") is False
    assert configuration.int_parameter(params, "DEFAULT_MAX_TOKENS") == 256
    assert configuration.int_parameter({}, "DEFAULT_MAX_TOKENS") is None
    with pytest.raises(errors.BackendConfigError, match='REPORT_CUSTOM_METRICS: "yes please" is not a boolean'):
        configuration.bool_parameter({"REPORT_CUSTOM_METRICS": "yes please"}, "REPORT_CUSTOM_METRICS")
    for bad in ("8k", "0", "-3", "1.5"):
        with pytest.raises(errors.BackendConfigError, match="DEFAULT_MAX_TOKENS"):
            configuration.int_parameter({"DEFAULT_MAX_TOKENS": bad}, "DEFAULT_MAX_TOKENS")


# -- sampling parameters ---------------------------------------------------------------------------------------------


def test_values_are_converted_strictly_and_false_is_false():
    spec = parse({"temperature": "0.5", "top_k": "40", "max_tokens": 7.0, "ignore_eos": "false", "stop": "\n"})
    assert spec.kwargs == {"temperature": 0.5, "top_k": 40, "max_tokens": 7, "ignore_eos": False, "stop": "\n"}


def test_default_max_tokens_replaces_vllms_16():
    assert parse({}).kwargs["max_tokens"] is None  # the rest of the context window
    assert parse({}, default_max_tokens=300).kwargs["max_tokens"] == 300
    assert parse({"max_tokens": 5}, default_max_tokens=300).kwargs["max_tokens"] == 5
    assert parse({"max_tokens": None}, default_max_tokens=300).kwargs["max_tokens"] == 300


def test_did_you_mean_never_names_the_same_switch_turned_the_other_way():
    fields = ["enable_log_requests", "max_model_len", "disable_log_stats"]
    assert errors.did_you_mean("disable_log_requests", fields) == ""
    assert errors.did_you_mean("enable_log_stats", fields) == ""
    assert errors.did_you_mean("max_model_lenn", fields) == ' (did you mean "max_model_len"?)'


def test_unknown_key_is_an_error_with_did_you_mean():
    with pytest.raises(errors.RequestError) as err:
        parse({"temprature": 0.1})
    assert err.value.field == "sampling_parameters.temprature"
    assert 'did you mean "temperature"' in str(err.value)


@pytest.mark.parametrize(
    "params, field, fragment",
    [
        ({"max_tokens": "8k"}, "sampling_parameters.max_tokens", "must be an integer"),
        ({"max_tokens": True}, "sampling_parameters.max_tokens", "must be an integer"),
        ({"temperature": "hot"}, "sampling_parameters.temperature", "must be a number"),
        ({"temperature": "nan"}, "sampling_parameters.temperature", "finite"),
        ({"ignore_eos": "sometimes"}, "sampling_parameters.ignore_eos", "not a boolean"),
        ({"stop": 5}, "sampling_parameters.stop", "string or a list of strings"),
        ({"stop_token_ids": ["a"]}, "sampling_parameters.stop_token_ids", "must be an integer"),
        ({"output_kind": 1}, "sampling_parameters.output_kind", "set by the backend"),
        ({"lora_name": 3}, "sampling_parameters.lora_name", "must be a string"),
        ({"logit_bias": {"x": 1}}, "sampling_parameters.logit_bias", "must be an integer"),
    ],
)
def test_bad_values_name_the_field(params, field, fragment):
    with pytest.raises(errors.RequestError) as err:
        parse(params)
    assert err.value.field == field
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ("{bad", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"x"', "must be a JSON object"),
        (b"\xff\xfe", "not valid UTF-8"),
    ],
)
def test_malformed_sampling_json(raw, fragment):
    with pytest.raises(errors.RequestError) as err:
        parse(raw)
    assert err.value.field == "sampling_parameters"
    assert fragment in str(err.value)


def test_request_parameters_merge_under_sampling_parameters_and_triton_keys_are_ignored():
    spec = parse({"temperature": 0.2}, {"temperature": 0.9, "top_p": "0.5", "triton_enable_empty_final_response": True})
    assert spec.kwargs["temperature"] == 0.2
    assert spec.kwargs["top_p"] == 0.5
    assert "triton_enable_empty_final_response" not in spec.kwargs
    with pytest.raises(errors.RequestError, match=r"^parameter tempreature: .*did you mean"):
        parse(None, {"tempreature": 1})


def test_lora_name_and_structured_outputs_are_split_out():
    spec = parse({"lora_name": "alpaca", "structured_outputs": {"choice": ["a", "b"]}, "max_tokens": 3})
    assert spec.lora_name == "alpaca"
    assert spec.structured == {"choice": ["a", "b"]}
    assert "structured_outputs" not in spec.kwargs and "lora_name" not in spec.kwargs
    # The older key, and the seed backend's JSON-string form.
    assert parse({"guided_decoding": json.dumps({"regex": "[0-9]+"})}).structured == {"regex": "[0-9]+"}
    with pytest.raises(errors.RequestError, match="not both"):
        parse({"guided_decoding": {"regex": "a"}, "structured_outputs": {"regex": "b"}})


STRUCTURED_FIELDS = [
    "json",
    "regex",
    "choice",
    "grammar",
    "json_object",
    "disable_any_whitespace",
    "disable_additional_properties",
    "whitespace_pattern",
    "structural_tag",
    "_backend",
]


def test_structured_output_checks():
    native.check_structured_keys({"json": {"type": "object"}}, STRUCTURED_FIELDS)
    with pytest.raises(errors.RequestError, match=r'structured_outputs\.choices: .*did you mean "choice"'):
        native.check_structured_keys({"choices": ["a"]}, STRUCTURED_FIELDS)
    with pytest.raises(errors.RequestError, match="give one constraint"):
        native.check_structured_keys({"json": {}, "regex": "a"} | {"json": {"type": "string"}}, STRUCTURED_FIELDS)
    with pytest.raises(errors.RequestError, match="not a valid regex"):
        native.check_structured_keys({"regex": "(unclosed"}, STRUCTURED_FIELDS)
    with pytest.raises(errors.RequestError, match="list of strings"):
        native.check_structured_keys({"choice": "yes"}, STRUCTURED_FIELDS)
    with pytest.raises(errors.RequestError, match="_backend: is not a structured-output option"):
        native.check_structured_keys({"_backend": "xgrammar"}, STRUCTURED_FIELDS)


def test_resolve_lora():
    adapters = {"alpaca": "/a", "doll": "/d"}
    assert native.resolve_lora(None, adapters) is None
    assert native.resolve_lora("doll", adapters) == ("doll", 2, "/d")
    with pytest.raises(errors.RequestError) as err:
        native.resolve_lora("alpacca", adapters)
    assert err.value.field == "sampling_parameters.lora_name"
    assert 'did you mean "alpaca"' in str(err.value) and "alpaca, doll" in str(err.value)
    with pytest.raises(errors.RequestError, match="LoRA is not enabled"):
        native.resolve_lora("alpaca", None)


# -- model files, devices, versions ----------------------------------------------------------------------------------


def test_load_lora_adapters(tmp_path):
    (tmp_path / "adapters" / "a").mkdir(parents=True)
    (tmp_path / "multi_lora.json").write_text(json.dumps({"a": "adapters/a", "b": "/abs/b"}))
    assert configuration.load_lora_adapters(str(tmp_path)) == {"a": str(tmp_path / "adapters" / "a"), "b": "/abs/b"}
    (tmp_path / "multi_lora.json").write_text('{"a": ')
    with pytest.raises(errors.BackendConfigError, match=r"multi_lora.json:1:\d+: invalid JSON"):
        configuration.load_lora_adapters(str(tmp_path))
    (tmp_path / "multi_lora.json").write_text('["a"]')
    with pytest.raises(errors.BackendConfigError, match="must be a JSON object"):
        configuration.load_lora_adapters(str(tmp_path))
    (tmp_path / "multi_lora.json").unlink()
    with pytest.raises(errors.BackendConfigError, match="not found"):
        configuration.load_lora_adapters(str(tmp_path))


@pytest.mark.parametrize(
    "kind, device, name, world, ids, expected",
    [
        ("GPU", 3, "m_0", 1, None, "3"),
        ("CPU", 0, "m_0", 1, None, None),
        ("MODEL", 0, "m_0", 2, None, None),
        ("MODEL", 0, "m_1", 2, None, "2,3"),  # the second instance does not pile onto GPU 0
        ("MODEL", 0, "m_0", 2, "4,5", "4,5"),
        ("MODEL", 0, "m_1", 2, "0,1;2,3", "2,3"),
    ],
)
def test_plan_visible_devices(kind, device, name, world, ids, expected):
    assert configuration.plan_visible_devices(kind, device, name, world, ids) == expected


@pytest.mark.parametrize(
    "kind, world, ids, fragment",
    [
        ("GPU", 2, None, "use KIND_MODEL"),
        ("MODEL", 2, "0", "lists 1 GPUs but model.json needs 2"),
        ("MODEL", 2, "0,0", "distinct"),
        ("MODEL", 1, "gpu0", "comma-separated"),
    ],
)
def test_plan_visible_devices_errors(kind, world, ids, fragment):
    with pytest.raises(errors.BackendConfigError, match=fragment):
        configuration.plan_visible_devices(kind, 0, "m_0", world, ids)


def test_version_check():
    assert environment.check_vllm_version("0.32.0") is None
    assert environment.check_vllm_version("0.26.0+cu130") is None
    assert "newer than" in environment.check_vllm_version("0.40.1")
    with pytest.raises(errors.BackendConfigError, match=r"vLLM 0\.6\.3\.post1 is too old.*>= 0\.20\.0"):
        environment.check_vllm_version("0.6.3.post1")
    with pytest.raises(errors.BackendConfigError, match="not installed"):
        environment.check_vllm_version(None)


# -- output assembly -------------------------------------------------------------------------------------------------


def completion(index=0, text="", token_ids=(), cumulative_logprob=None, logprobs=None, finish_reason=None):
    return SimpleNamespace(
        index=index,
        text=text,
        token_ids=list(token_ids),
        cumulative_logprob=cumulative_logprob,
        logprobs=logprobs,
        finish_reason=finish_reason,
    )


def request_output(*completions, prompt="Hi", prompt_token_ids=(1, 2, 3)):
    return SimpleNamespace(prompt=prompt, prompt_token_ids=list(prompt_token_ids), outputs=list(completions))


def as_dict(tensors):
    return dict(tensors)


def test_text_only_by_default_with_prompt_prepended_once():
    options = native.OutputOptions(stream=False, prepend_prompt=True)
    out = as_dict(native.assemble_outputs(request_output(completion(text=" there")), options, first=True))
    assert list(out) == ["text_output"]
    assert out["text_output"].tolist() == [b"Hi there"]
    assert out["text_output"].dtype == np.object_
    later = as_dict(native.assemble_outputs(request_output(completion(text="!")), options, first=False))
    assert later["text_output"].tolist() == [b"!"]


def every_output() -> native.OutputOptions:
    """A streamed request that asks for every additional output."""
    return native.OutputOptions(
        stream=True,
        prepend_prompt=False,
        return_finish_reason=True,
        return_cumulative_logprob=True,
        return_logprobs=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )


def test_every_additional_output():
    Lp = lambda v: SimpleNamespace(logprob=v, rank=1, decoded_token="x")  # noqa: E731
    options = every_output()
    ro = request_output(
        completion(
            text="ab",
            token_ids=(7, 8),
            cumulative_logprob=-1.5,
            logprobs=[{7: Lp(-1.0)}, {8: Lp(-0.5)}],
            finish_reason="length",
        )
    )
    out = as_dict(native.assemble_outputs(ro, options, first=True))
    assert out["text_output"].tolist() == [b"ab"]
    assert out["finish_reason"].tolist() == [b"length"]
    assert out["cumulative_logprob"].dtype == np.float32 and out["cumulative_logprob"].tolist() == [-1.5]
    assert json.loads(out["logprobs"][0]) == [
        {"7": {"logprob": -1.0, "rank": 1, "decoded_token": "x"}},
        {"8": {"logprob": -0.5, "rank": 1, "decoded_token": "x"}},
    ]
    assert out["num_input_tokens"].dtype == np.uint32 and out["num_input_tokens"].tolist() == [3]
    assert out["num_output_tokens"].dtype == np.uint32 and out["num_output_tokens"].tolist() == [2]


def test_only_the_requested_outputs_are_built():
    options = dataclasses.replace(every_output(), requested=frozenset({"num_output_tokens", "finish_reason"}))
    out = as_dict(native.assemble_outputs(request_output(completion(text="a", token_ids=(4,))), options, first=True))
    assert sorted(out) == ["finish_reason", "num_output_tokens"]

    class Unreadable:
        """A value the response must not touch: an output built only to be pruned costs the GIL on every send."""

        def __getattr__(self, name):
            raise AssertionError(f"built an output nobody asked for (read .{name})")

        def __add__(self, other):
            raise AssertionError("built text_output, which nobody asked for")

        __radd__ = __add__

    untouched = completion(text=Unreadable(), token_ids=(4, 5), logprobs=[{7: Unreadable()}], finish_reason="length")
    untouched.cumulative_logprob = Unreadable()
    out = as_dict(native.assemble_outputs(request_output(untouched), options, first=True))
    assert out["num_output_tokens"].tolist() == [2] and out["finish_reason"].tolist() == [b"length"]
    asked_for_more = dataclasses.replace(native.OutputOptions(stream=True, prepend_prompt=False), requested=frozenset(
        {"text_output", "num_output_tokens"}
    ))  # fmt: skip
    # an output asked for but not switched on by its return_* input stays out, as before
    out = as_dict(native.assemble_outputs(request_output(completion(text="a")), asked_for_more, first=True))
    assert list(out) == ["text_output"]


def test_unfinished_and_missing_values():
    options = every_output()
    out = as_dict(native.assemble_outputs(request_output(completion(text="a")), options, first=True))
    assert out["finish_reason"].tolist() == [b"None"]  # as the upstream backend reports an unfinished stream
    assert math.isnan(out["cumulative_logprob"][0])
    assert out["logprobs"].tolist() == [b"null"]


def test_n_completions_are_placed_by_index_in_streams():
    options = native.OutputOptions(stream=True, prepend_prompt=False, n=3, return_num_output_tokens=True)
    ro = request_output(completion(index=2, text="c", token_ids=(5,)), completion(index=0, text="a", token_ids=(4, 4)))
    out = as_dict(native.assemble_outputs(ro, options, first=False))
    assert out["text_output"].tolist() == [b"a", b"", b"c"]
    assert out["num_output_tokens"].tolist() == [2, 0, 1]


def test_unicode_text_is_utf8():
    options = native.OutputOptions(stream=False, prepend_prompt=True)
    out = as_dict(native.assemble_outputs(request_output(completion(text="é✓"), prompt="ß"), options, first=True))
    assert out["text_output"][0].decode("utf-8") == "ßé✓"


# -- auto-complete ---------------------------------------------------------------------------------------------------


class FakeAutoCompleteConfig:
    """The part of Triton's auto-complete config object the backend uses (same checks as pb_utils.ModelConfig)."""

    def __init__(self, config):
        self.config = {"input": [], "output": [], "max_batch_size": 0, **config}

    def as_dict(self):
        return self.config

    def add_input(self, tensor):
        assert tensor["name"] not in {t["name"] for t in self.config["input"]}
        self.config["input"].append(tensor)

    def add_output(self, tensor):
        assert tensor["name"] not in {t["name"] for t in self.config["output"]}
        self.config["output"].append(tensor)

    def set_model_transaction_policy(self, policy):
        current = self.config.get("model_transaction_policy", {}).get("decoupled")
        if current is not None and current != policy["decoupled"]:
            raise ValueError("trying to change decoupled property")
        self.config["model_transaction_policy"] = policy

    def set_max_batch_size(self, size):
        if self.config["max_batch_size"] > size:
            raise ValueError("configuration specified max_batch_size")
        self.config["max_batch_size"] = size


def test_auto_complete_fills_the_contract_into_a_minimal_config():
    cfg = backend.TritonPythonModel.auto_complete_config(FakeAutoCompleteConfig({"name": "m"})).as_dict()
    assert [(t["name"], t["data_type"], t["dims"], t["optional"]) for t in cfg["input"]] == [
        (name, dtype, list(dims), optional) for name, dtype, dims, optional in contract.INPUTS
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]] == [
        (name, dtype, list(dims)) for name, dtype, dims, _ in contract.OUTPUTS
    ]
    assert cfg["model_transaction_policy"] == {"decoupled": True} and cfg["max_batch_size"] == 0


def test_auto_complete_keeps_listed_tensors_and_rejects_contradictions():
    listed = {"input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}]}
    cfg = backend.TritonPythonModel.auto_complete_config(FakeAutoCompleteConfig(listed)).as_dict()
    assert [t["name"] for t in cfg["input"]].count("text_input") == 1 and len(cfg["input"]) == len(contract.INPUTS)
    wrong = {"input": [{"name": "stream", "data_type": "TYPE_STRING", "dims": [1]}]}
    with pytest.raises(ValueError, match="input 'stream' has data_type TYPE_STRING; the vLLM backend needs TYPE_BOOL"):
        backend.TritonPythonModel.auto_complete_config(FakeAutoCompleteConfig(wrong))
    with pytest.raises(ValueError, match="decoupled"):
        backend.TritonPythonModel.auto_complete_config(
            FakeAutoCompleteConfig({"model_transaction_policy": {"decoupled": False}})
        )
    with pytest.raises(ValueError, match="max_batch_size"):
        backend.TritonPythonModel.auto_complete_config(FakeAutoCompleteConfig({"max_batch_size": 8}))


class _FactorySender:
    """Like Triton's response sender: the response factory is freed with the final response, and asking a freed
    factory whether it was cancelled is a use-after-free in the server (here: recorded)."""

    def __init__(self) -> None:
        import threading

        self.freed = False
        self.checks_after_free = 0
        self.checking = threading.Event()

    def is_cancelled(self) -> bool:
        import time

        self.checking.set()
        time.sleep(0.001)  # the round trip to the server, with the GIL released
        if self.freed:
            self.checks_after_free += 1
        return False

    def send_final(self) -> None:
        self.freed = True


def test_backend_middleware_drops_only_what_has_nothing_to_act_on_behind_the_gateway():
    def entry(name):
        return SimpleNamespace(cls=type(name, (), {}))

    names = ["ScalingMiddleware", "CORSMiddleware", "AuthenticationMiddleware", "PrometheusInstrumentatorMiddleware"]
    stack = [entry(n) for n in [*names, "GZipMiddleware"]]
    kept = openai_app.backend_middleware(stack)
    assert [m.cls.__name__ for m in kept] == ["ScalingMiddleware", "GZipMiddleware"]
    assert kept[0] is stack[0] and kept[1] is stack[-1]


def test_the_cancellation_watcher_never_asks_a_finished_request():
    import asyncio
    import threading

    model = backend.TritonPythonModel()
    model._live = {}
    model._loop = asyncio.new_event_loop()
    model._closing = False
    model._dead_reason = None
    model.engine = SimpleNamespace(errored=False)
    model._stop_watching = threading.Event()
    in_flight = []
    for i in range(40):
        job = jobs.Job(
            request=None,
            sender=_FactorySender(),
            request_id=str(i),
            prompt={},
            sampling_params=None,
            lora_request=None,
            options=None,
        )
        model._live[job.request_id] = job
        in_flight.append(job)
    watcher = threading.Thread(target=model._watch)
    backend_interval, backend.WATCH_INTERVAL_S = backend.WATCH_INTERVAL_S, 0.0005
    watcher.start()
    try:
        for job in in_flight:
            job.sender.checking.wait(timeout=5)  # finish each while the watcher may be mid-check on it
            model._finish(job)
            job.sender.send_final()
            model._live.pop(job.request_id)
    finally:
        model._stop_watching.set()
        watcher.join(timeout=5)
        backend.WATCH_INTERVAL_S = backend_interval
        model._loop.close()
    assert all(job.finished for job in in_flight)
    assert sum(job.sender.checks_after_free for job in in_flight) == 0


def test_the_cancellation_watcher_asks_at_most_its_rate_of_checks_and_reaches_every_request_in_turn():
    import asyncio

    class Counting:
        def __init__(self) -> None:
            self.asked = 0

        def is_cancelled(self) -> bool:
            self.asked += 1
            return False

    model = backend.TritonPythonModel()
    model._loop = asyncio.new_event_loop()
    model._closing, model._dead_reason = False, None
    model.engine = SimpleNamespace(errored=False)
    budget = int(backend.WATCH_CHECKS_PER_S * backend.WATCH_INTERVAL_S)
    in_flight = [jobs.Job(None, Counting(), str(i), {}, None, None, None) for i in range(budget * 2 + budget // 2)]
    model._live = {job.request_id: job for job in in_flight}
    try:
        model._sweep()
        assert sum(job.sender.asked for job in in_flight) == budget  # not one round trip per request per interval
        model._sweep()
        model._sweep()
        assert all(job.sender.asked >= 1 for job in in_flight)  # three sweeps reach all 2.5 budgets' worth
        assert max(job.sender.asked for job in in_flight) <= 2
        few = in_flight[: budget // 2]
        model._live = {job.request_id: job for job in few}
        model._sweep()
        assert all(job.sender.asked >= 2 for job in few)  # within the budget, every request every interval
    finally:
        model._loop.close()


# -- what killed the engine ------------------------------------------------------------------------------------------

_DEATH_LINES = [
    (
        "(EngineCore pid=77) ERROR 12-01 09:20:15 [multiproc_executor.py:155] Worker proc VllmWorker-0 died "
        "unexpectedly (exit code: -4), shutting down executor.",
        "Worker proc VllmWorker-0 died, killed by SIGILL",
    ),
    ("Worker proc VllmWorker-1 died unexpectedly (exit code: 1)", "Worker proc VllmWorker-1 died (exit code 1)"),
    ("Worker proc VllmWorker-1 died unexpectedly (exit code: -99)", "Worker proc VllmWorker-1 died (exit code -99)"),
    (
        "ERROR 12-01 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        "Engine core proc EngineCore_DP0 died",
    ),
]


@pytest.mark.parametrize("line, cause", _DEATH_LINES)
def test_the_engine_death_cause_is_the_last_process_death_in_the_log(line, cause):
    earlier = "Worker proc VllmWorker-9 died unexpectedly (exit code: -9)\n"
    assert environment.engine_death_cause(f"{earlier}I1201 started\n{line}\nE1201 [vllm] engine dead\n") == cause
    assert environment.engine_death_cause("I1201 all is well\n") is None


# vLLM 0.26's engine core dying of torch's out-of-memory error under load (ENGINE_PROCESS, three engines on one GPU):
# the cause is twenty lines above the end, and no process death is logged (tests/doctor/written_logs/README.md).
_OOM_DEATH_LOG = (Path(__file__).parents[1] / "doctor" / "written_logs" / "cuda-oom-serving-1.log").read_text()


def test_an_engine_that_died_of_gpu_memory_is_said_to_have_run_out_of_it():
    assert environment.engine_death_cause(_OOM_DEATH_LOG) == (
        "the GPU ran out of memory (CUDA out of memory: it asked for 1.75 GiB more on GPU 0, which has 79.19 GiB "
        "with 1.12 GiB free)"
    )
    died = _OOM_DEATH_LOG + "ERROR 12-05 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly\n"
    assert environment.engine_death_cause(died).endswith(", and Engine core proc EngineCore_DP0 died")


def test_an_engine_process_end_is_said_in_words():
    assert environment.exit_description(-9) == "was killed by SIGKILL"
    assert environment.exit_description(1) == "exited with status 1"
    assert environment.exit_description(-99) == "exited with status -99"


def test_launch_reads_a_death_from_the_log_as_the_backend_does():
    # The backend names the cause in its error responses, launch on its console: one wording for both.
    from vllm_repo.serve import launch

    for line, _ in _DEATH_LINES:
        assert launch.engine_death_reason(line) == environment.engine_death_cause(line)


def test_the_server_log_is_found_only_when_output_goes_to_a_file(tmp_path):
    import os

    log = tmp_path / "server.log"
    with open(log, "w") as out:
        assert environment.server_log_file(out.fileno()) == str(log)
    read, write = os.pipe()
    try:
        assert environment.server_log_file(write) is None
    finally:
        os.close(read)
        os.close(write)
    log.write_text("x" * 10 + "tail")
    assert environment.read_log_tail(str(log), size=4) == "tail"
    # Not before where this run began, however much is asked for.
    assert environment.read_log_tail(str(log), start=environment.log_size(str(log)) - 6) == "xxtail"
    assert environment.log_size(str(log)) == 14 and environment.log_size(str(tmp_path / "missing")) == 0
    assert environment.read_log_tail(str(tmp_path / "missing")) == ""


# -- the startup heap ------------------------------------------------------------------------------------------------


def test_freezing_the_startup_heap_collects_its_garbage_first_and_freezes_what_lives():
    import gc
    import weakref

    class Node:
        pass

    garbage, alive = Node(), Node()
    garbage.self = garbage  # a cycle: only a collection frees it
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_freeze_count()
    try:
        frozen = environment.freeze_startup_heap()
        assert gone() is None  # collected, not frozen for the life of the process
        assert frozen == gc.get_freeze_count() > before
        assert not any(obj is alive for obj in gc.get_objects())  # beyond the collector's reach now
    finally:
        gc.unfreeze()
    assert any(obj is alive for obj in gc.get_objects())


def test_the_send_thread_sends_in_order_off_the_calling_thread_and_survives_a_failing_send(caplog):
    import threading

    sent: list[tuple[int, str]] = []
    thread = sends.SendThread()

    def failing() -> None:
        raise RuntimeError("the client is gone")

    try:
        for i in range(50):
            thread.submit(lambda i=i: sent.append((i, threading.current_thread().name)))
            if i == 10:
                thread.submit(failing)
    finally:
        thread.stop()  # sends what was submitted first
    assert [i for i, _ in sent] == list(range(50))
    assert {name for _, name in sent} == {"vllm-sends"}
    assert thread.sends == 51
    assert "could not send a response: the client is gone" in caplog.text


def test_a_send_resolves_its_future_on_the_loop_with_the_sends_error_and_a_cancelled_one_is_left_alone(caplog):
    import asyncio

    async def scenario():
        loop = asyncio.get_running_loop()
        thread = sends.SendThread()
        try:
            ok, failed, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
            cancelled.cancel()  # its request was cancelled while the send was queued

            def failing() -> None:
                raise ConnectionError("the client is gone")

            thread.submit(lambda: None, ok)
            thread.submit(failing, failed)
            thread.submit(lambda: None, cancelled)
            assert await asyncio.wait_for(ok, 5) is None
            with pytest.raises(ConnectionError, match="the client is gone"):
                await asyncio.wait_for(failed, 5)
        finally:
            thread.stop()
        await asyncio.sleep(0.01)  # the settle callbacks have run
        return cancelled

    assert asyncio.run(scenario()).cancelled()
    assert "could not send" not in caplog.text  # a send with a future reports to its waiter, not to the log


class _MergingEngine:
    """vLLM's output path in small: an engine that makes one token per stream every ``step_s`` whatever the frontend
    does, an output handler on the loop that hands a step's outputs to the streams in chunks of ``chunk`` with a yield
    between chunks (vLLM's VLLM_V1_OUTPUT_PROC_CHUNK_SIZE), and per-request collectors that merge deltas the consumer
    has not read yet (RequestOutputCollector)."""

    def __init__(self, tokens: int, step_s: float, chunk: int) -> None:
        self.tokens, self.step_s, self.chunk = tokens, step_s, chunk
        self.pending: dict[str, list[int]] = {}
        self.made: dict[str, int] = {}
        self.ready: dict[str, Any] = {}
        self.errored = False

    async def run(self, streams: int) -> None:
        import asyncio
        import time

        started, steps_done = time.monotonic(), 0
        while any(self.made.get(r, 0) < self.tokens for r in self.made) or len(self.made) < streams:
            await asyncio.sleep(self.step_s / 4)
            due = int((time.monotonic() - started) / self.step_s)
            for _ in range(due - steps_done):  # outputs queued while the loop was busy are handled step by step
                live = [r for r in self.made if self.made[r] < self.tokens]
                for start in range(0, len(live), self.chunk):
                    for rid in live[start : start + self.chunk]:
                        self.made[rid] += 1
                        self.pending[rid].append(self.made[rid])
                        self.ready[rid].set()
                    if start + self.chunk < len(live):
                        await asyncio.sleep(0)
            steps_done = due

    async def generate(self, prompt, params, request_id, lora_request=None):
        import asyncio

        self.made[request_id], self.pending[request_id] = 0, []
        self.ready[request_id] = asyncio.Event()
        got = 0
        while got < self.tokens:
            await self.ready[request_id].wait()
            self.ready[request_id].clear()
            delta, self.pending[request_id] = self.pending[request_id], []
            got += len(delta)
            yield SimpleNamespace(
                finished=got >= self.tokens,
                prompt="",
                prompt_token_ids=[1],
                outputs=[SimpleNamespace(index=0, text="", token_ids=delta, finish_reason=None)],
            )


@pytest.mark.parametrize("chunk", [2, 8], ids=["more-streams-than-vllms-output-chunk", "within-one-chunk"])
def test_responses_per_request_fall_when_sends_are_slower_than_the_engine(chunk, monkeypatch):
    """Each send takes longer than an engine step for all streams; a stream must not wake and send once per token
    (what vLLM's chunked output handler made of the engine loop's own sends above 128 streams): the tokens made while
    its response was in flight go out merged in its next one, in order, with the final response last. Within one
    output chunk of streams the engine loop sends itself; above it, the send threads do: a request's first response
    from the thread that no stream's tokens queue on, the ones after it from the request's own stream thread."""
    import asyncio
    import threading
    import time

    monkeypatch.setattr(
        stub,
        "pb_utils",
        SimpleNamespace(
            TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
            InferenceResponse=lambda output_tensors: dict(output_tensors),
            Tensor=lambda name, value: (name, value),
        ),
    )
    tokens, streams = 30, 8

    class Sender:
        def __init__(self):
            self.responses: list[tuple[list[int], int, str]] = []

        def send(self, response, flags):
            time.sleep(0.002)  # the round trip to the server
            self.responses.append((response["num_output_tokens"].tolist(), flags, threading.current_thread().name))

    async def scenario():
        model = backend.TritonPythonModel.__new__(backend.TritonPythonModel)
        model._loop = asyncio.get_running_loop()
        model._live, model._metrics, model._render = {}, None, None
        model._edge_sends = [sends.SendThread(f"vllm-sends-edge-{i}") for i in range(2)]
        model._sends = model._edge_sends[0]
        model._stream_sends = [sends.SendThread(f"vllm-sends-{i}") for i in range(2)]
        model._inline_sends_up_to = chunk
        model.engine = _MergingEngine(tokens, step_s=0.002, chunk=chunk)  # chunk 2: 4 chunks a step, 3 yields
        options = native.OutputOptions(stream=True, prepend_prompt=False, return_num_output_tokens=True)
        in_flight = [jobs.Job(None, Sender(), f"r{i}", {"prompt": "x"}, None, None, options) for i in range(streams)]
        model._live = {job.request_id: job for job in in_flight}  # as _spawn() keeps them
        for i, job in enumerate(in_flight):
            job.stream_sends = model._stream_sends[i % 2]
            job.edge_sends = model._edge_sends[(i // 2) % 2]
        engine = asyncio.ensure_future(model.engine.run(streams))
        try:
            await asyncio.wait_for(asyncio.gather(*(model._generate(job) for job in in_flight)), 30)
            await asyncio.wait_for(engine, 5)
        finally:
            for thread in (*model._edge_sends, *model._stream_sends):
                thread.stop()
        return in_flight

    in_flight = asyncio.run(scenario())
    for i, job in enumerate(in_flight):
        counts = [c[0] for c, _, _ in job.sender.responses]
        assert sum(counts) == tokens  # nothing lost or repeated
        assert [flags for _, flags, _ in job.sender.responses] == [0] * (len(counts) - 1) + [1]  # the final one last
        threads = [thread for _, _, thread in job.sender.responses]
        if chunk < streams:  # send threads while more streams than a chunk are live (the last few: the loop)
            assert threads[0] == f"vllm-sends-edge-{(i // 2) % 2}"  # the first: the request's own edge thread
            assert f"vllm-sends-{i % 2}" in threads[1:-1]
            # one stream thread and one edge thread per request
            assert not {f"vllm-sends-{(i + 1) % 2}", f"vllm-sends-edge-{(i // 2 + 1) % 2}"} & set(threads)
        else:
            assert set(threads) == {threading.main_thread().name}
    per_request = sum(len(job.sender.responses) for job in in_flight) / streams
    # 8 streams x 2 ms per send against a 2 ms step: about one response per 8 tokens once the load has built up.
    assert per_request <= tokens / 3, per_request


def test_request_ids_are_random_128_bit_hex_made_without_a_system_call(monkeypatch):
    def no_syscall(size):
        raise AssertionError("os.urandom lets go of the GIL on execute()'s thread")

    monkeypatch.setattr(backend.os, "urandom", no_syscall)
    ids = {jobs.new_request_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len({i[:8] for i in ids}) > 1990  # not a counter: the leading digits vary too
