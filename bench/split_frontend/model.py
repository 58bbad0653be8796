"""An experiment for the bundled backend at 256-512 streams, not a backend to serve with: vLLM's frontend (AsyncLLM:
tokenizing, output processing, detokenizing) in a process of its own, and the Triton stub only relaying.

The bundled backend runs AsyncLLM inside the stub, where one GIL serves vLLM's output handler, the request tasks and
every send to the server; on the H200 above 128 streams those together hold the GIL about all the time while the
engine waits (bench/results/backend.md). Here the stub's threads only parse requests, send responses and ask about
cancellation; frontend.py, started by initialize() with the same engine arguments, runs AsyncLLM and sends each loop
turn's outputs as one message. A request's next output is read there only once the stub says its last response
went out, so vLLM merges what the engine made meanwhile, as the bundled backend's send path does.

What it serves: streamed generate requests with text_input and sampling_parameters (a JSON object of SamplingParams
fields), answering text_output and num_output_tokens, which is what bench/backend_throughput.py sends. Load it there
as a variant in the same server as the bundled backend:

    python bench/backend_throughput.py ... --backend-variant split=bench/split_frontend
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Client
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

HERE = os.path.dirname(os.path.abspath(__file__))
READY_TIMEOUT_S = 900.0
# As the bundled backend: at most this many cancellation checks a second, in turn.
WATCH_CHECKS_PER_S = 250
WATCH_INTERVAL_S = 0.1
# Threads that send the responses, each request on one of them (its order kept). On two CPU cores four were worse
# than one (0.597x raw at 32 streams against 0.658-0.678x, 62.6 responses per request against 50-54): overlapping
# sends let requests read their next outputs sooner, so vLLM merged less, as with the bundled backend's send pool.
SEND_THREADS = 1

INPUTS = (
    ("text_input", "TYPE_STRING", [1], False),
    ("stream", "TYPE_BOOL", [1], True),
    ("sampling_parameters", "TYPE_STRING", [1], True),
    ("return_num_output_tokens", "TYPE_BOOL", [1], True),
)
OUTPUTS = (("text_output", "TYPE_STRING", [-1]), ("num_output_tokens", "TYPE_UINT32", [-1]))


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config: Any) -> Any:
        have = {t["name"] for t in config.as_dict().get("input", [])}
        for name, data_type, dims, optional in INPUTS:
            if name not in have:
                config.add_input({"name": name, "data_type": data_type, "dims": dims, "optional": optional})
        have = {t["name"] for t in config.as_dict().get("output", [])}
        for name, data_type, dims in OUTPUTS:
            if name not in have:
                config.add_output({"name": name, "data_type": data_type, "dims": dims})
        config.set_model_transaction_policy({"decoupled": True})
        config.set_max_batch_size(0)
        return config

    def initialize(self, args: dict[str, str]) -> None:
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "model.json")) as f:
            settings = json.load(f)
        self._dir = tempfile.mkdtemp(prefix="vllm-frontend-")
        address, authkey = os.path.join(self._dir, "frontend.sock"), secrets.token_bytes(16)
        # The stub's python3 is the serving environment's (first on PATH), as for vLLM's own child processes.
        self._child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "frontend.py"), address, authkey.hex(), json.dumps(settings)]
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:  # the frontend listens before it starts the engine
            if self._child.poll() is not None:
                raise RuntimeError(f"the frontend process exited ({self._child.returncode}) before it listened")
            try:
                self._conn = Client(address, family="AF_UNIX", authkey=authkey)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise RuntimeError("the frontend process did not listen in time") from None
                time.sleep(0.05)
        answer = self._conn.recv()  # ("ready",) once AsyncLLM is up, or ("error", text)
        if answer[0] != "ready":
            raise RuntimeError(f"the frontend process could not start vLLM: {answer[1]}")
        self._send_lock = threading.Lock()
        self._senders: dict[int, Any] = {}
        # Held while a request's sender is asked whether it was cancelled, and to take a sender for its final
        # response: asked after its final went out, Triton reads a freed response factory (a SIGSEGV in
        # TRITONBACKEND_ResponseFactoryIsCancelled, seen here).
        self._live_lock = threading.Lock()
        self._keys = itertools.count()
        self.sends = 0
        self._closing = False
        self._queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(SEND_THREADS)]
        for i, work in enumerate(self._queues):
            threading.Thread(target=self._send_loop, args=(work,), name=f"frontend-send-{i}", daemon=True).start()
        self._receiver = threading.Thread(target=self._receive, name="frontend-receive", daemon=True)
        self._receiver.start()
        self._stop_watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="frontend-watch", daemon=True)
        self._watcher.start()
        sys.setswitchinterval(0.001)  # as the bundled backend: execute() gets the GIL soon
        pb_utils.Logger.log_info(f"[split] frontend process {self._child.pid} ready")

    def _post(self, message: tuple) -> None:
        with self._send_lock:
            self._conn.send(message)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            text = _first(request, "text_input")
            raw = _first(request, "sampling_parameters")
            params = json.loads(raw) if raw is not None else {}
            key = next(self._keys)
            self._senders[key] = sender
            self._post(("add", key, text.decode() if isinstance(text, bytes) else str(text), params))
        return None

    def _receive(self) -> None:
        """Each message is one frontend loop turn's outputs: each goes to its request's send thread."""
        while True:
            try:
                batch = self._conn.recv()
            except (EOFError, OSError):
                break
            shares: list[list[tuple]] = [[] for _ in self._queues]
            for item in batch:
                shares[item[0] % len(shares)].append(item)
            for work, share in zip(self._queues, shares, strict=True):
                if share:
                    work.put(share)
        for work in self._queues:
            work.put(None)
        if not self._closing:
            pb_utils.Logger.log_error("[split] the frontend process is gone")
            with self._live_lock:
                orphans, self._senders = self._senders, {}
            for sender in orphans.values():
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError("the frontend process is gone"))
                sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _send_loop(self, work: queue.SimpleQueue) -> None:
        """Send a share of a loop turn's outputs, then tell the frontend which requests may read their next output."""
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while True:
            share = work.get()
            if share is None:
                return
            sent = []
            for key, text, tokens, finished, error in share:
                if finished or error is not None:
                    with self._live_lock:
                        sender = self._senders.pop(key, None)
                else:
                    sender = self._senders.get(key)
                if sender is None:
                    continue
                try:
                    if error is not None:
                        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)), flags=final)
                        continue
                    response = pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                            pb_utils.Tensor("num_output_tokens", np.array([tokens], dtype=np.uint32)),
                        ]
                    )
                    sender.send(response, flags=final if finished else 0)
                    self.sends += 1
                except Exception as exc:  # the client is gone: the frontend aborts the request
                    pb_utils.Logger.log_warn(f"[split] could not send: {exc}")
                    with self._live_lock:
                        self._senders.pop(key, None)
                    self._post(("abort", key))
                    continue
                if not finished:
                    sent.append(key)
            if sent and not self._closing:
                self._post(("sent", sent))

    def _watch(self) -> None:
        budget = max(1, int(WATCH_CHECKS_PER_S * WATCH_INTERVAL_S))
        start = 0
        while not self._stop_watching.wait(WATCH_INTERVAL_S):
            live = list(self._senders.items())
            if len(live) > budget:
                start %= len(live)
                live = (live[start:] + live[:start])[:budget]
                start += budget
            for key, sender in live:
                with self._live_lock:
                    if key not in self._senders:
                        continue  # finished since
                    try:
                        cancelled = sender.is_cancelled()
                    except Exception:
                        cancelled = False
                    if cancelled:
                        del self._senders[key]
                if cancelled:
                    self._post(("abort", key))
                    sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError("request was cancelled")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )

    def finalize(self) -> None:
        self._closing = True
        self._stop_watching.set()
        pb_utils.Logger.log_info(f"[split] {self.sends} sends")
        try:
            self._post(("stop",))
        except OSError:
            pass
        try:
            self._child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._conn.close()
        try:
            os.unlink(os.path.join(self._dir, "frontend.sock"))
            os.rmdir(self._dir)
        except OSError:
            pass
