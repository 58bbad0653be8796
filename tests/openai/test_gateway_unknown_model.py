"""A request naming a model no backend serves: the gateway answers vllm serve's 404 itself, naming every served model
(vllm serve's "Valid aliases"), in the shape of the endpoint asked, and Triton never sees the request, so a client's
mistake leaves no ERROR line in the server's log (vLLM logs its own 404s at ERROR)."""

from __future__ import annotations

import json

import pytest

from tests.support.standin_triton import StandInTriton, _client, run

CARDS = {
    "tiny": [{"id": "tiny", "object": "model"}, {"id": "sql-lora", "object": "model", "parent": "tiny"}],
    "tinyq": [{"id": "tinyq", "object": "model", "parent": None}],
}


def _ask(path: str, body: bytes, headers: dict[str, str] | None = None):
    async def scenario():
        triton = StandInTriton(models=("tiny", "tinyq"), cards=CARDS)
        client = await _client(triton)
        try:
            sent = {"Content-Type": "application/json", **(headers or {})}
            response = await client.post(path, data=body, headers=sent)
            return response.status, await response.read(), [c for c in triton.calls if c[1] != "/v1/models"]
        finally:
            await client.close()

    return run(scenario())


MESSAGE = "The model `nosuch` does not exist. Valid aliases: tiny, tinyq."


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize", "/detokenize"]
)
def test_an_unknown_model_gets_vllms_404_naming_every_served_model_without_reaching_triton(path):
    status, body, calls = _ask(path, json.dumps({"model": "nosuch", "prompt": "x", "stream": True}).encode())
    assert status == 404
    assert json.loads(body) == {"error": {"message": MESSAGE, "type": "NotFoundError", "param": "model", "code": 404}}
    assert calls == []  # no backend asked: no "Error with model" line in Triton's log


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_the_anthropic_routes_get_the_404_in_anthropics_shape(path):
    status, body, calls = _ask(path, json.dumps({"model": "nosuch", "max_tokens": 4, "messages": []}).encode())
    assert status == 404 and calls == []
    assert json.loads(body) == {"type": "error", "error": {"type": "NotFoundError", "message": MESSAGE}}


def test_a_lora_adapter_is_no_alias_but_is_served():
    status, _, calls = _ask("/v1/completions", json.dumps({"model": "sql-lora", "prompt": "x"}).encode())
    assert status == 200 and calls[-1][0] == "tiny"


def test_a_body_vllm_refuses_before_it_looks_at_the_model_still_goes_to_a_backend():
    # vLLM answers a body sent as another media type with its 400 before it checks the model: that answer is vLLM's.
    status, _, calls = _ask(
        "/v1/chat/completions", json.dumps({"model": "nosuch"}).encode(), headers={"Content-Type": "text/plain"}
    )
    assert status == 200 and [c[0] for c in calls] == ["tiny"]


@pytest.mark.parametrize("variable", ["VLLM_SKIP_MODEL_NAME_VALIDATION", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"])
def test_where_vllm_may_take_any_name_the_backend_decides(monkeypatch, variable):
    # vLLM serves any name (or loads an adapter of that name on demand) with these set: the first model answers.
    monkeypatch.setenv(variable, "1")
    status, _, calls = _ask("/v1/completions", json.dumps({"model": "nosuch", "prompt": "x"}).encode())
    assert status == 200 and [c[0] for c in calls] == ["tiny"]


def test_an_empty_name_is_no_name():
    # vllm serve takes "" as its default model; with several models there is none, so the name is required.
    status, body, calls = _ask("/v1/completions", json.dumps({"model": "", "prompt": "x"}).encode())
    assert status == 400 and json.loads(body)["error"]["param"] == "model" and calls == []
