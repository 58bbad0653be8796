"""VR7xx: openai.json, the vllm serve options of a model's OpenAI API."""

import json

from tests.validate.helpers import codes, only, run


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
