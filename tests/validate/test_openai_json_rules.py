"""VR7xx: openai.json, the vllm serve options of a model's OpenAI API."""

import json

from tests.support.repo_builder import codes, only, run


def with_openai(repo, options, **files):
    text = options if isinstance(options, str) else json.dumps(options, indent=2)
    return repo.model("llm", files={"1/openai.json": text, **files})


def test_a_good_openai_json_raises_nothing(repo):
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    options = {"tool_call_parser": "hermes", "enable_auto_tool_choice": True, "chat_template": "chat.jinja"}
    with_openai(repo, options, **{"1/chat.jinja": template})
    assert not {c for c in codes(run(repo.root)) if c.startswith("VR7")}
    # A template written out, not a file name, is vLLM's to read.
    with_openai(repo, {"chat_template": template})
    assert "VR705" not in codes(run(repo.root))


def test_vr701_openai_json_that_is_not_one_object(repo):
    with_openai(repo, '{"tool_call_parser": "hermes",}')
    (d,) = only(run(repo.root), "VR701")
    assert d.file.endswith("1/openai.json") and d.line == 1 and d.severity.value == "error"
    with_openai(repo, ["hermes"])
    (d,) = only(run(repo.root), "VR701")
    assert "JSON array" in d.message


def test_vr701_only_for_models_of_the_vllm_backend(repo):
    repo.model("other", config='backend: "python"\n', engine_args=None, files={"1/openai.json": "{oops"})
    assert "VR701" not in codes(run(repo.root))


def test_vr702_options_the_backend_sets(repo):
    with_openai(repo, {"served_model_name": "qwen", "api_key": "k", "tool_call_parser": "hermes"})
    found = only(run(repo.root), "VR702")
    assert {d.message.split("'")[1] for d in found} == {"served_model_name", "api_key"}
    assert all(d.line is not None for d in found)
    assert "--api-key" in next(d.hint for d in found if "api_key" in d.message)


def test_vr703_engine_arguments_belong_in_model_json(repo):
    with_openai(repo, {"max_model_len": 4096, "tool_call_parser": "hermes", "served_model_name": "x"})
    (d,) = only(run(repo.root), "VR703")  # served_model_name is VR702's, though EngineArgs has it too
    assert "'max_model_len'" in d.message and "model.json" in d.hint and d.line == 2


def test_vr704_http_server_options_do_nothing_behind_the_gateway(repo):
    with_openai(repo, {"port": 9000, "allowed_origins": ["*"], "ssl_keyfile": "k.pem", "response_role": "bot"})
    found = only(run(repo.root), "VR704")
    assert {d.message.split("'")[1] for d in found} == {"port", "allowed_origins", "ssl_keyfile"}
    assert all(d.severity.value == "warning" for d in found)
    assert "--allowed-origins" in next(d.message for d in found if "allowed_origins" in d.message)


def test_vr705_a_chat_template_file_that_is_not_there(repo):
    with_openai(repo, {"chat_template": "templates/chat.jinja"})
    (d,) = only(run(repo.root), "VR705")
    assert "templates/chat.jinja" in d.message and d.line == 2
    with_openai(repo, {"chat_template": "templates/chat.jinja"}, **{"1/templates/chat.jinja": "{{ messages }}"})
    assert "VR705" not in codes(run(repo.root))


def test_vr706_an_option_the_chosen_release_does_not_have(repo):
    with_openai(repo, {"enable_auto_tool_choice": True, "tool_call_parsr": "hermes"})
    (d,) = only(run(repo.root), "VR706")
    assert "'tool_call_parsr'" in d.message and d.line == 3 and d.severity.value == "error"
    assert d.hint == "did you mean 'tool_call_parser'?"
    # vllm serve's gRPC server came after 0.26: its option is refused there, and the hint says where it is.
    with_openai(repo, {"grpc_port": 50051})
    (d,) = only(run(repo.root, vllm_version="0.26.0"), "VR706")
    assert "0.26.0" in d.message and "0.32.0" in d.hint
    assert "VR706" not in codes(run(repo.root, vllm_version="0.32.0"))
    with_openai(repo, {"no_such_option_anywhere": 1})
    (d,) = only(run(repo.root), "VR706")
    assert "vllm serve --help" in d.hint


def test_vr706_for_a_release_whose_parser_was_not_read_only_a_near_miss_warns(repo, monkeypatch):
    from vllm_repo.schema import serve_options

    others = {"0.1.0": frozenset({"tool_call_parser", "chat_template"})}
    monkeypatch.setattr(serve_options, "bundled_serve_options", lambda: others)
    with_openai(repo, {"tool_call_parsr": "hermes", "an_option_of_another_release": True})
    (d,) = only(run(repo.root), "VR706")
    assert d.severity.value == "warning" and d.hint == "did you mean 'tool_call_parser'?"


def test_vr706_names_the_runs_of_releases_that_have_an_option():
    from vllm_repo.validate.rules.vr7_openai_json import _spans

    releases = ["0.7.0", "0.8.1", "0.9.2", "0.10.0", "0.32.0"]
    assert _spans(releases, [True, True, False, False, True]) == "0.7.0 to 0.8.1, 0.32.0"
    assert _spans(releases, [False, False, True, True, True]) == "0.9.2 to 0.32.0"


def test_the_bundled_serve_options_hold_what_the_rules_name():
    from vllm_repo.backend.vllm_repo_backend.contract import OPENAI_OPTIONS_SET_BY_BACKEND
    from vllm_repo.schema.loader import bundled_versions
    from vllm_repo.schema.serve_options import bundled_serve_options
    from vllm_repo.validate.rules.vr7_openai_json import SERVER_OPTIONS

    releases = bundled_serve_options()
    assert list(releases) == list(bundled_versions())  # every bundled release, oldest first
    known = frozenset().union(*releases.values())
    # Every option VR702 and VR704 name is one of vllm serve's own (model_tag is its positional argument, and
    # served_model_name an engine argument it takes).
    assert set(SERVER_OPTIONS) | (set(OPENAI_OPTIONS_SET_BY_BACKEND) - {"model_tag", "served_model_name"}) <= known
    # None of them is an engine argument: VR703 would answer for it otherwise.
    assert "max_model_len" not in known and "tool_call_parser" in releases["0.26.0"]
