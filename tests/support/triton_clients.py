"""Clients of a real Triton server with the bundled backend: HTTP generate and generate_stream, gRPC streaming through
tritonclient, and the metrics endpoint read back."""

from __future__ import annotations

import json
import queue
import re
import time
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient

from tests.support.backend_server import MODEL_NAME

MODEL = MODEL_NAME


def http(server, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{server.http_url}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def generate(server, body: dict) -> tuple[int, dict]:
    status, text = http(server, f"/v2/models/{MODEL}/generate", body)
    return status, json.loads(text)


def generate_stream(server, body: dict) -> list[dict]:
    status, text = http(server, f"/v2/models/{MODEL}/generate_stream", body)
    assert status == 200, text
    events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]
    assert events, text
    return events


def tensor_inputs(prompt: str, sampling: dict | None = None, **flags) -> list:
    inputs = []

    def add(name, array, datatype):
        t = grpcclient.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        inputs.append(t)

    add("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES")
    if sampling is not None:
        add("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=np.object_), "BYTES")
    for name, value in flags.items():
        add(name, np.array([value], dtype=bool), "BOOL")
    return inputs


def is_final(result) -> bool:
    param = result.get_response().parameters.get("triton_final_response")
    return bool(param and param.bool_param)


def grpc_stream(
    server, prompt: str, sampling: dict | None = None, timeout: float = 60, outputs: tuple[str, ...] = (), **flags
):
    """All responses of one request over a gRPC stream, until the one flagged final. With
    enable_empty_final_response the client would show a separate empty final response if the backend sent one.
    ``outputs``: the outputs to ask for (none: every one)."""
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        client.async_stream_infer(
            MODEL,
            tensor_inputs(prompt, sampling, **flags),
            outputs=[grpcclient.InferRequestedOutput(name) for name in outputs] or None,
            enable_empty_final_response=True,
        )
        results = []
        while True:
            result, error = responses.get(timeout=timeout)
            if error is not None:
                return results, error
            results.append(result)
            if is_final(result):
                return results, None
    finally:
        client.stop_stream()
        client.close()


def metrics_text(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        return resp.read().decode()


def scrape_metrics(server) -> dict[str, float]:
    text = metrics_text(server)
    values = {}
    for line in text.splitlines():
        if line.startswith("vllm:"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def metric(values: dict[str, float], name: str, **labels) -> float:
    labels = {"model": MODEL, "version": "1", **labels}
    for key, value in values.items():
        if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items()):
            return value
    raise KeyError(f"{name} {labels} not in {sorted(values)}")


def wait_metrics_flushed() -> None:
    time.sleep(1.2)  # the backend reports metrics every 0.5 s (and before each final response)


def metric_types(text: str) -> dict[str, str]:
    """{family: type} of the vllm:* families on a metrics page."""
    return {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE vllm:")}


def sample_labels(text: str, family: str) -> list[dict[str, str]]:
    """The label sets of a family's samples (a histogram's _count, _sum and _bucket lines included)."""
    found = []
    for line in text.splitlines():
        match = re.match(r"([^{\s]+)\{(.*)\} ", line)
        if match and match.group(1) in (family, f"{family}_count", f"{family}_sum", f"{family}_bucket"):
            found.append(dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))))
    return found


def cancel_mid_stream(server) -> str:
    """A 480-token stream cancelled by its gRPC client after three responses: waits for the backend to say it aborted
    the request in the engine, checks the log lines of Triton's own vLLM backend, and returns the request's id."""
    aborted = r"\[vllm\] request (\w+) cancelled by the client: aborted in the engine"
    before = set(re.findall(aborted, server.log_text()))  # earlier tests' requests (an OpenAI one, say)
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer(MODEL, tensor_inputs("Hello", {"max_tokens": 480, "ignore_eos": True}, stream=True))
    for _ in range(3):
        _, error = responses.get(timeout=60)
        assert error is None
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 10
    while not set(re.findall(aborted, server.log_text())) - before:
        assert time.monotonic() < deadline, "the backend did not abort the cancelled request"
        time.sleep(0.1)
    log = server.log_text()
    (request_id,) = set(re.findall(aborted, log)) - before
    # The lines of Triton's own vLLM backend, which scripts grep for, name the same request, in this order.
    cancelling = log.index(f"[vllm] Cancelling the request {request_id}")
    assert cancelling < log.index(f"[vllm] Successfully cancelled the request {request_id}")
    return request_id
