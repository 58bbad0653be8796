"""compare() without a server: what counts as a difference."""

from __future__ import annotations

from tests.support.openai_parity import REQUESTS, Observation, _strip, compare


def observation(**changes) -> Observation:
    base = {
        "name": "chat/greedy",
        "endpoint": "chat",
        "stream": False,
        "status": 200,
        "model": "tiny",
        "object": "chat.completion",
        "choices": [{"index": 0, "role": "assistant", "text": "hi", "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        "fields": ["choices", "id", "model"],
    }
    return Observation(**{**base, **changes})


def test_identical_runs_have_no_differences():
    assert compare([observation()], [observation()]) == []


def test_each_difference_is_named_by_request_and_path():
    other = observation(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
    assert compare([observation()], [other]) == [
        "chat/greedy: usage.completion_tokens: 1 != 2",
        "chat/greedy: usage.total_tokens: 4 != 5",
    ]


def test_floats_compare_exactly_and_types_count():
    lp = [{"token": "hi", "logprob": -0.5}]
    a = observation(choices=[{"index": 0, "text": "hi", "logprobs": lp}])
    b = observation(choices=[{"index": 0, "text": "hi", "logprobs": [{"token": "hi", "logprob": -0.5000000001}]}])
    assert len(compare([a], [b])) == 1
    assert compare([observation(status=200)], [observation(status=200.0)]) == ["chat/greedy: status: 200 != 200.0"]


def test_ids_timestamps_and_fingerprints_are_left_out():
    error = {"message": "m", "id": "a", "created": 1, "system_fingerprint": "x"}
    assert _strip({"error": error, "list": [{"id": 1, "n": 2}]}) == {"error": {"message": "m"}, "list": [{"n": 2}]}
    assert compare([observation(error={"id": "a", "code": 4})], [observation(error={"id": "b", "code": 4})]) == []


def test_missing_requests_are_reported():
    assert compare([observation()], []) == ["chat/greedy: only in the first run"]
    assert compare([], [observation()]) == ["chat/greedy: only in the second run"]


def test_request_names_are_unique():
    names = [r.name for r in REQUESTS]
    assert len(names) == len(set(names))


def test_the_answers_id_counts_where_the_request_named_it():
    assert compare([observation(named_ids=["chatcmpl-a"])], [observation(named_ids=["chatcmpl-b"])]) == [
        'chat/greedy: named_ids[0]: "chatcmpl-a" != "chatcmpl-b"'
    ]
    assert compare([observation(named_ids=["chatcmpl-a"])], [observation(named_ids=["chatcmpl-a"])]) == []
