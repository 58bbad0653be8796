"""STREAM_ONE_RESPONSE_PER_TOKEN: a stream whose outputs vLLM merged still gets one response per token. The split is
pure logic; the backend's own stream loop runs it, against an engine that merges as vLLM's collector does and
Triton's stub faked (stub.pb_utils)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_repo.backend import model as backend
from vllm_repo.backend.vllm_repo_backend import configuration, contract, jobs, native, per_token, stub

# A byte-level vocabulary: token 4 and 5 are the two bytes of "é", so "é" is complete only after token 5.
VOCAB = {1: b" The", 2: b" cat", 3: b" is", 4: b"\xc3", 5: b"\xa9", 6: b"!", 7: b" here"}


def decode(ids: list[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", "replace")


def _logprob(value: float) -> Any:
    return SimpleNamespace(logprob=value, rank=1, decoded_token=None)


def _merged(tokens: list[int], finished: bool, context: list[int], **extra: Any) -> Any:
    """vLLM's merged DELTA output for ``tokens`` made after ``context``: its text is what vLLM's detokenizer gave."""
    text = decode([*context, *tokens])[len(decode(context)) :] if context else decode(tokens)
    completion = SimpleNamespace(
        index=0,
        text=text,
        token_ids=tokens,
        cumulative_logprob=extra.get("cumulative_logprob"),
        logprobs=extra.get("logprobs"),
        finish_reason="length" if finished else None,
        stop_reason=None,
    )
    return SimpleNamespace(prompt="Hi", prompt_token_ids=[9, 9], outputs=[completion], finished=finished)


def test_a_merged_output_becomes_one_output_per_token_whose_texts_add_up_to_vllms():
    history: dict[int, list[int]] = {0: [1]}
    logprobs = [{2: _logprob(-0.5)}, {3: _logprob(-0.25)}, {4: _logprob(-1.0)}, {5: _logprob(-0.125)}]
    merged = _merged([2, 3, 4, 5], True, [1], cumulative_logprob=-3.0, logprobs=logprobs)
    outputs = per_token.split(merged, decode, history)
    assert [o.outputs[0].token_ids for o in outputs] == [[2], [3], [4], [5]]
    # "é" takes two tokens: the first of them sends "", the second the whole character.
    assert [o.outputs[0].text for o in outputs] == [" cat", " is", "", "é"]
    assert "".join(o.outputs[0].text for o in outputs) == merged.outputs[0].text
    # vLLM's total after the last token, less the sampled logprobs after each one.
    assert [o.outputs[0].cumulative_logprob for o in outputs] == [-1.625, -1.875, -2.875, -3.0]
    assert [o.outputs[0].logprobs for o in outputs] == [[p] for p in logprobs]
    assert [o.finished for o in outputs] == [False, False, False, True]
    assert [o.outputs[0].finish_reason for o in outputs] == [None, None, None, "length"]
    assert history == {0: [1, 2, 3, 4, 5]}
    single = _merged([6], False, [1, 2, 3, 4, 5])
    assert per_token.split(single, decode, history) == [single]  # one token: as it is
    assert history[0][-1] == 6


def test_decoding_that_disagrees_with_vllms_text_gives_the_rest_to_the_last_token():
    # A stop string cut vLLM's text short of what the tokens decode to.
    merged = _merged([2, 3, 7], True, [])
    merged.outputs[0].text = " cat i"
    outputs = per_token.split(merged, decode, {})
    assert [o.outputs[0].text for o in outputs] == [" cat", "", " i"]


class _MergingStream:
    """vLLM's generate() for one stream whose collector merged tokens: the outputs it yields, in order."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def __call__(self, prompt, params, request_id, lora_request=None):
        return self._outputs()

    async def _outputs(self):
        seen: list[int] = []
        for i, tokens in enumerate(self.batches):
            yield _merged(tokens, i == len(self.batches) - 1, list(seen))
            seen.extend(tokens)


def _stream_responses(monkeypatch, per_token_on: bool, batches: list[list[int]]) -> list[tuple[dict, int]]:
    monkeypatch.setattr(
        stub,
        "pb_utils",
        SimpleNamespace(
            TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
            InferenceResponse=lambda output_tensors: dict(output_tensors),
            Tensor=lambda name, value: (name, value),
        ),
    )
    sent: list[tuple[dict, int]] = []
    sender = SimpleNamespace(send=lambda response, flags: sent.append((response, flags)))
    params = configuration.config_parameters(
        {"parameters": {"STREAM_ONE_RESPONSE_PER_TOKEN": {"string_value": "true" if per_token_on else "false"}}}
    )

    async def scenario() -> None:
        model = backend.TritonPythonModel.__new__(backend.TritonPythonModel)
        model.one_response_per_token = configuration.bool_parameter(params, "STREAM_ONE_RESPONSE_PER_TOKEN")
        model._loop = asyncio.get_running_loop()
        model._live, model._metrics, model._render = {}, None, None
        model._inline_sends_up_to = 128
        model.engine = SimpleNamespace(generate=_MergingStream(batches), tokenizer=SimpleNamespace(decode=_decode_kw))
        options = native.OutputOptions(stream=True, prepend_prompt=False, return_num_output_tokens=True)
        history = {} if model.one_response_per_token and options.stream else None
        job = jobs.Job(None, sender, "r", {"prompt": "Hi"}, None, None, options, token_history=history)
        model._live[job.request_id] = job
        await asyncio.wait_for(model._generate(job), 10)

    asyncio.run(scenario())
    return sent


def _decode_kw(ids: list[int], skip_special_tokens: bool = True) -> str:
    return decode(ids)


@pytest.mark.parametrize("per_token_on", [True, False], ids=["one-per-token", "merged"])
def test_the_backends_stream_sends_one_response_per_token_when_the_parameter_says_so(monkeypatch, per_token_on):
    batches = [[1], [2, 3, 3, 3], [4, 5], [6]]  # what vLLM's collector merged while a response was in flight
    sent = _stream_responses(monkeypatch, per_token_on, batches)
    texts = [r["text_output"][0].decode() for r, _ in sent]
    counts = [int(r["num_output_tokens"][0]) for r, _ in sent]
    assert "".join(texts) == " The cat is is isé!"
    assert [flags for _, flags in sent] == [0] * (len(sent) - 1) + [1]
    if per_token_on:
        assert counts == [1] * 8 and texts == [" The", " cat", " is", " is", " is", "", "é", "!"]
    else:
        assert counts == [1, 4, 2, 1]  # as vLLM merged them


def test_the_parameter_is_part_of_the_contract_that_validate_checks():
    assert "STREAM_ONE_RESPONSE_PER_TOKEN" in contract.BOOLEAN_PARAMETERS
