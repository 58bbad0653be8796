"""The backend's OpenAI requests without Triton or vLLM: the envelope the gateway sends, the stream's chunks and final
flag, and openai.json read as `vllm serve`'s command line."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from vllm_repo.backend.vllm_repo_backend import (
    contract,
    errors,
    openai_app,
    openai_wire,
)


def test_openai_tensors_are_in_the_contract():
    assert contract.INPUTS_BY_NAME["openai_request"] == ("openai_request", "TYPE_STRING", (1,), True)
    assert contract.OUTPUTS_BY_NAME["openai_status"].data_type == "TYPE_INT32"
    assert contract.OUTPUTS_BY_NAME["openai_response"].dims == (1,)


def envelope(value) -> bytes:
    return json.dumps(value).encode()


def test_openai_envelope_gives_endpoint_method_and_body():
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
    endpoint, method, data, stream_to, headers, query = openai_wire.parse_openai_request(
        envelope({"endpoint": "/v1/chat/completions", "body": body})
    )
    assert (endpoint, method, stream_to, headers, query) == ("/v1/chat/completions", "POST", None, None, b"")
    assert json.loads(data) == body
    assert "héllo".encode() in data  # UTF-8, not \\u escapes
    models = openai_wire.parse_openai_request(np.bytes_(envelope({"endpoint": "/v1/models"})))
    assert models == ("/v1/models", "GET", b"", None, None, b"")
    # A body the gateway could not parse goes to vLLM as it came, for vLLM's own answer to bad JSON.
    assert openai_wire.parse_openai_request(envelope({"endpoint": "/v1/completions", "body": "{oops"}))[2] == b"{oops"


def test_every_route_the_gateway_forwards_by_model_is_one_the_backend_takes_by_post():
    for endpoint in contract.OPENAI_MODEL_ENDPOINTS:
        assert openai_wire.parse_openai_request(envelope({"endpoint": endpoint, "body": {}}))[:2] == (endpoint, "POST")
    with pytest.raises(openai_wire.OpenAIError, match="/v1/embeddings"):
        openai_wire.parse_openai_request(envelope({"endpoint": "/v1/embeddings", "body": {}}))


def test_a_stored_responses_routes_carry_its_id_and_the_query_string():
    stored = openai_wire.parse_openai_request(
        envelope({"endpoint": "/v1/responses/resp_1?stream=true&starting_after=2"})
    )
    assert stored[:3] == ("/v1/responses/resp_1", "GET", b"") and stored.query == b"stream=true&starting_after=2"
    cancel = openai_wire.parse_openai_request(envelope({"endpoint": "/v1/responses/resp_1/cancel"}))
    assert (cancel.endpoint, cancel.method, cancel.query) == ("/v1/responses/resp_1/cancel", "POST", b"")
    for unserved in ("/v1/responses/", "/v1/responses/a/b", "/v1/responses/a/cancel/x"):
        with pytest.raises(openai_wire.OpenAIError) as refused:
            openai_wire.parse_openai_request(envelope({"endpoint": unserved}))
        assert refused.value.status == 404


def test_openai_envelope_names_the_gateways_stream_socket():
    raw = envelope({"endpoint": "/v1/completions", "body": {}, "stream_to": {"socket": "/run/g/s.sock", "id": 7}})
    assert openai_wire.parse_openai_request(raw).stream_to == openai_wire.StreamTo("/run/g/s.sock", 7)


def test_openai_envelope_gives_the_client_headers_as_asgi_has_them():
    headers = [["Content-Type", "text/plain"], ["x-request-id", "r\udcff"], ["x-a", "1"], ["x-a", "2"]]
    raw = envelope({"endpoint": "/v1/completions", "body": {}, "headers": headers})
    # Names lower-cased, order and repeats kept, a value the gateway decoded with surrogateescape as its bytes.
    assert openai_wire.parse_openai_request(raw).headers == [
        (b"content-type", b"text/plain"),
        (b"x-request-id", b"r\xff"),
        (b"x-a", b"1"),
        (b"x-a", b"2"),
    ]
    assert openai_wire.parse_openai_request(envelope({"endpoint": "/v1/completions", "headers": []})).headers == []


@pytest.mark.parametrize(
    "raw, status, fragment",
    [
        (b"\xff", 400, "not valid UTF-8"),
        (b"{nope", 400, "not valid JSON"),
        (envelope(["/v1/models"]), 400, "must be a JSON object"),
        (envelope({"endpoint": "/v1/models", "bdy": {}}), 400, 'did you mean "body"'),
        (envelope({"endpoint": "/v1/embeddings"}), 404, "/v1/chat/completions, /v1/completions, /v1/responses"),
        (envelope({"body": {}}), 404, "endpoint null is not served"),
        (envelope({"endpoint": "/v1/models", "stream_to": "/tmp/s"}), 400, "stream_to must be"),
        (envelope({"endpoint": "/v1/models", "stream_to": {"socket": "/tmp/s", "id": -1}}), 400, "stream_to must be"),
        (envelope({"endpoint": "/v1/models", "stream_to": {"socket": "/tmp/s", "id": True}}), 400, "stream_to must be"),
        (envelope({"endpoint": "/v1/models", "stream_to": {"socket": "", "id": 1}}), 400, "stream_to must be"),
        (envelope({"endpoint": "/v1/models", "headers": {"x-a": "1"}}), 400, "headers must be"),
        (envelope({"endpoint": "/v1/models", "headers": [["x-a", 1]]}), 400, "headers must be"),
        (envelope({"endpoint": "/v1/models", "headers": [["", "1"]]}), 400, "headers must be"),
        (envelope({"endpoint": "/v1/models", "headers": [["x-a"]]}), 400, "headers must be"),
    ],
)
def test_a_malformed_openai_envelope_is_an_error_in_vllms_shape(raw, status, fragment):
    with pytest.raises(openai_wire.OpenAIError) as caught:
        openai_wire.parse_openai_request(raw)
    assert caught.value.status == status and fragment in str(caught.value)
    error = json.loads(caught.value.body())["error"]
    assert list(error) == ["message", "type", "param", "code"]  # vLLM's ErrorInfo, in its order
    assert error["code"] == status and fragment in error["message"]


def test_openai_json_is_written_as_vllms_server_writes_it():
    assert openai_wire.openai_json({"a": "é", "b": [1, None]}) == '{"a":"é","b":[1,null]}'.encode()
    with pytest.raises(ValueError):
        openai_wire.openai_json({"x": float("nan")})


def test_sse_chunks_join_while_a_send_is_in_flight_and_the_final_flag_goes_with_the_last():
    joiner = openai_wire.SseJoiner()
    assert joiner.take() is None  # nothing yet
    joiner.push(b"data: 1\n\n")
    assert joiner.take() == (b"data: 1\n\n", False)
    joiner.push(b"data: 2\n\n")
    joiner.push(b"")  # empty ASGI bodies add nothing
    joiner.push(b"data: 3\n\n")
    assert joiner.take() is None  # one send in flight at a time
    joiner.sent()
    assert joiner.take() == (b"data: 2\n\ndata: 3\n\n", False)
    joiner.push(b"data: [DONE]\n\n")
    joiner.finish()
    joiner.sent()
    assert joiner.take() == (b"data: [DONE]\n\n", True)
    joiner.sent()
    assert joiner.take() is None  # the final went: nothing after it


def test_the_final_flag_goes_alone_when_the_last_chunk_was_in_flight():
    joiner = openai_wire.SseJoiner()
    joiner.push(b"data: [DONE]\n\n")
    assert joiner.take() == (b"data: [DONE]\n\n", False)
    joiner.finish()
    assert joiner.take() is None
    joiner.sent()
    assert joiner.take() == (b"", True)


def test_a_complete_answer_is_one_final_send():
    joiner = openai_wire.SseJoiner()
    joiner.push(b'{"id":')
    joiner.push(b'"x"}')
    joiner.finish()
    assert joiner.take() == (b'{"id":"x"}', True)


def frontend_parser():
    """A stand-in for vllm serve's parser: the kinds of options it has."""

    parser = argparse.ArgumentParser()
    parser.add_argument("--chat-template", type=str, default=None)
    parser.add_argument("--tool-call-parser", type=str, choices=["hermes", "llama3_json"], default=None)
    parser.add_argument("--enable-auto-tool-choice", action="store_true", default=False)
    parser.add_argument("--enable-prompt-tokens-details", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--allowed-origins", type=json.loads, default=["*"])
    parser.add_argument("--middleware", type=str, action="append", default=[])
    parser.add_argument("--lora-modules", type=str, nargs="+", default=None)
    parser.add_argument("--served-model-name", nargs="+", type=str, default=None)
    parser.add_argument("--max-log-len", type=int, default=None)
    parser.add_argument("--max-model-len", type=int, default=None)  # an engine argument
    return parser


def argv_for(options):
    parser = frontend_parser()
    argv = openai_app.frontend_argv(options, parser._actions, ["max_model_len", "model"], "/m/1/openai.json")
    return argv, parser.parse_args(argv)


def test_openai_json_becomes_vllm_serves_command_line():
    argv, args = argv_for(
        {
            "chat_template": "/m/1/t.jinja",
            "tool_call_parser": "hermes",
            "enable_auto_tool_choice": True,
            "enable_prompt_tokens_details": False,
            "allowed_origins": ["https://a"],
            "middleware": ["a.b", "c.d"],
            "max_log_len": 100,
        }
    )
    assert args.chat_template == "/m/1/t.jinja" and args.tool_call_parser == "hermes"
    assert args.enable_auto_tool_choice is True and args.enable_prompt_tokens_details is False
    assert "--no-enable-prompt-tokens-details" in argv
    assert args.allowed_origins == ["https://a"]
    assert args.middleware == ["a.b", "c.d"]
    assert args.max_log_len == 100
    # vLLM's own flags are BooleanOptionalAction (--x / --no-x): true is the positive spelling.
    argv, args = argv_for({"enable_prompt_tokens_details": True})
    assert argv == ["--enable-prompt-tokens-details"] and args.enable_prompt_tokens_details is True
    # False for a store_true flag and null for anything are the defaults: nothing on the command line.
    assert argv_for({"enable_auto_tool_choice": False, "max_log_len": None})[0] == []


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"tool_call_parsr": "hermes"}, '"tool_call_parsr" is not a vllm serve frontend option (did you mean "tool_'),
        ({"max_model_len": 512}, '"max_model_len" is an engine argument; put it in model.json'),
        ({"served_model_name": ["x"]}, '"served_model_name" is set by the backend'),
        ({"lora_modules": ["a=b"]}, "multi_lora.json"),
        ({"enable_auto_tool_choice": "yes"}, '"enable_auto_tool_choice" must be true or false'),
    ],
)
def test_openai_json_errors_name_the_file_and_the_key(options, fragment):
    parser = frontend_parser()
    with pytest.raises(errors.BackendConfigError) as caught:
        openai_app.frontend_argv(options, parser._actions, ["max_model_len"], "/m/1/openai.json")
    assert str(caught.value).startswith("/m/1/openai.json: ")
    assert fragment in str(caught.value)


def test_a_bad_choice_is_left_to_vllms_parser():
    # The value reaches the parser as given, so vLLM's own choices and types decide.
    argv, _ = argv_for({"max_log_len": 3})
    parser = frontend_parser()
    bad = openai_app.frontend_argv({"tool_call_parser": "nope"}, parser._actions, [], "p")
    assert bad == ["--tool-call-parser", "nope"] and argv == ["--max-log-len", "3"]
    with pytest.raises(SystemExit):
        parser.parse_args(bad)


def test_load_openai_options_resolves_a_relative_chat_template(tmp_path):
    assert openai_app.load_openai_options(str(tmp_path)) is None  # no file: nothing to check
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    (tmp_path / "openai.json").write_text(json.dumps({"chat_template": "t.jinja", "response_role": "bot"}))
    options = openai_app.load_openai_options(str(tmp_path))
    assert options == {"chat_template": str(tmp_path / "t.jinja"), "response_role": "bot"}
    # An inline template or a missing file stays as written (vLLM says what is wrong with it).
    assert openai_app.resolve_chat_template("{{ messages }}", str(tmp_path)) == "{{ messages }}"
    (tmp_path / "openai.json").write_text("[1]")
    with pytest.raises(errors.BackendConfigError, match=r"openai\.json: must be a JSON object"):
        openai_app.load_openai_options(str(tmp_path))
