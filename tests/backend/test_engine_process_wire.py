"""What ENGINE_PROCESS's process sends the stub for each output (engine_process.for_the_stub): every tensor the stub
builds from it is the one it built from vLLM's whole RequestOutput, first response and later ones alike, while the
prompt and its token ids, which vLLM repeats in every output, cross the socket once or not at all."""

from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

from vllm_repo.backend.vllm_repo_backend import engine_process, native

PROMPT = "Tell me about the sea, " * 26  # about 128 tokens' worth
EVERY_OUTPUT = frozenset(
    ["text_output", "finish_reason", "cumulative_logprob", "logprobs", "num_input_tokens", "num_output_tokens"]
)


def request_output(text: str, ids: list[int], finished: bool, prompt_ids: list[int] | None) -> types.SimpleNamespace:
    """vLLM's RequestOutput as vLLM fills it for a stream (DELTA): the prompt again in every output."""
    completion = types.SimpleNamespace(
        index=0, text=text, token_ids=ids, cumulative_logprob=-0.5 * len(ids), logprobs=None,
        finish_reason="length" if finished else None, stop_reason=None,
    )  # fmt: skip
    return types.SimpleNamespace(
        request_id="r1", prompt=PROMPT, prompt_token_ids=prompt_ids, prompt_logprobs=None, outputs=[completion],
        finished=finished, metrics=None, lora_request=None, encoder_prompt=None, num_cached_tokens=0,
    )  # fmt: skip


def tensors(output, first: bool, prepend: bool) -> dict[str, list]:
    options = native.OutputOptions(
        stream=True, prepend_prompt=prepend, return_finish_reason=True, return_cumulative_logprob=True,
        return_logprobs=True, return_num_input_tokens=True, return_num_output_tokens=True, requested=EVERY_OUTPUT,
    )  # fmt: skip
    return {name: np.asarray(value).tolist() for name, value in native.assemble_outputs(output, options, first)}


@pytest.mark.parametrize("prepend", [True, False])
@pytest.mark.parametrize("prompt_ids", [list(range(1000, 1128)), None])
def test_the_stub_builds_the_same_responses_from_what_is_sent(prepend, prompt_ids):
    outputs = [
        request_output(" The", [791], False, prompt_ids),
        request_output(" sea is", [9581, 374], False, prompt_ids),
        request_output(" wide.", [7029, 13], True, prompt_ids),
    ]
    for i, output in enumerate(outputs):
        first = i == 0
        sent = pickle.loads(pickle.dumps(engine_process.for_the_stub(output, first)))
        assert tensors(sent, first, prepend) == tensors(output, first, prepend), i
        assert sent.finished == output.finished
    first_text = tensors(engine_process.for_the_stub(outputs[0], True), True, True)["text_output"]
    assert first_text == [(PROMPT + " The").encode()]


def test_the_prompt_crosses_once_and_its_ids_not_at_all():
    prompt_ids = list(range(1000, 1128))
    output = request_output(" sea", [9581], False, prompt_ids)
    first = pickle.dumps(engine_process.for_the_stub(output, True))
    later = pickle.dumps(engine_process.for_the_stub(output, False))
    assert PROMPT.encode() in first and PROMPT.encode() not in later
    whole = pickle.dumps(output)
    # the ids (pickled as 2-byte ints, one after another) are in vLLM's output, and in neither of these
    ids = b"".join(b"M" + i.to_bytes(2, "little") for i in prompt_ids[:16])
    assert ids in whole and ids not in first and ids not in later
    assert len(later) * 4 < len(whole)
