"""infer against a stand-in for Triton's HTTP endpoint: the completion folded from the streamed responses, and each
error answer explained in infer's terms (an OpenAI port given for Triton's, a model the server lacks or has not
loaded, an error mid-stream, no server at all)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.fake_triton import Answer, FakeTriton, fake_triton, sse
from vllm_repo.serve.errors import InferError, TritonUnreachable
from vllm_repo.serve.infer import infer
from vllm_repo.serve.ports import free_port

STREAM = ("POST", "/v2/models/tiny/generate_stream")
INDEX = ("POST", "/v2/repository/index")
UNKNOWN = b'{"error":"Request for unknown model: \'tiny\' is not found"}'


@pytest.fixture
def triton() -> Iterator[FakeTriton]:
    with fake_triton() as server:
        yield server


def test_the_completion_is_folded_from_the_streamed_responses(triton):
    triton.answers[STREAM] = Answer(
        chunks=sse(
            {"text_output": "Hel", "finish_reason": "None", "num_input_tokens": 3, "num_output_tokens": 1},
            {"text_output": "lo", "finish_reason": "length", "num_input_tokens": 3, "num_output_tokens": 2},
        )
    )
    pieces: list[str] = []
    completion = infer("tiny", "Hi", url=triton.url, max_tokens=3, params={"temperature": 0}, on_text=pieces.append)
    assert pieces == ["Hel", "lo"] and completion.text == "Hello"
    assert completion.outputs() == {
        "finish_reason": "length",
        "num_input_tokens": 3,
        "num_output_tokens": 3,
        "responses": 2,
    }
    sent = json.loads(triton.requests[0][2])
    assert json.loads(sent["sampling_parameters"]) == {"max_tokens": 3, "temperature": 0}
    assert sent["exclude_input_in_output"] is True and sent["return_num_output_tokens"] is True


def test_no_stream_uses_generate(triton):
    answer = Answer(body=b'{"text_output": "Hello", "finish_reason": "stop"}')
    triton.answers[("POST", "/v2/models/tiny/generate")] = answer
    completion = infer("tiny", "Hi", url=triton.url, stream=False)
    assert (completion.text, completion.finish_reason, completion.responses) == ("Hello", "stop", 1)


def test_an_openai_port_is_named_as_such(triton):
    triton.answers[("GET", "/v1/models")] = Answer(body=b'{"object": "list", "data": []}')
    with pytest.raises(InferError, match="is the OpenAI API, not Triton's HTTP endpoint") as wrong:
        infer("tiny", "Hi", url=triton.url)
    assert "Triton's HTTP port" in wrong.value.hint


def test_a_model_the_server_lacks_names_the_ones_it_has(triton):
    triton.answers[STREAM] = Answer(400, UNKNOWN)
    triton.answers[INDEX] = Answer(body=b'[{"name": "other", "version": "1", "state": "READY", "reason": ""}]')
    with pytest.raises(InferError, match=f"the server at {triton.url} has no model 'tiny'") as unknown:
        infer("tiny", "Hi", url=triton.url)
    assert unknown.value.hint == "its models: other"


def test_a_model_in_the_repository_but_not_loaded_says_its_state_and_how_to_load_it(triton):
    triton.answers[STREAM] = Answer(400, UNKNOWN)
    triton.answers[INDEX] = Answer(body=b'[{"name": "tiny", "version": "1", "state": "UNAVAILABLE", "reason": "died"}]')
    with pytest.raises(InferError, match=r"model 'tiny' at .* is not loaded \(Triton: UNAVAILABLE, died\)") as unloaded:
        infer("tiny", "Hi", url=triton.url)
    assert f"{triton.url}/v2/repository/models/tiny/load" in unloaded.value.hint


def test_an_error_mid_stream_comes_after_the_text_before_it(triton):
    triton.answers[STREAM] = Answer(chunks=sse({"text_output": "Hel"}, {"error": "engine core died (log: /x.log)"}))
    pieces: list[str] = []
    with pytest.raises(InferError, match=r"error mid-stream: engine core died \(log: /x.log\)"):
        infer("tiny", "Hi", url=triton.url, on_text=pieces.append)
    assert pieces == ["Hel"]


def test_no_server_says_how_to_wait_for_one():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TritonUnreachable, match=f"no Triton server answers at {url}") as refused:
        infer("tiny", "Hi", url=url)
    assert "--wait" in refused.value.hint
