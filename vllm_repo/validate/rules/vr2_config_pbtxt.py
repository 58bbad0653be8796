"""VR2xx: config.pbtxt, parsed with Triton's own ModelConfig protobuf, against what the vLLM backend needs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import ModelDirectory
from vllm_repo.repository.documents import PbtxtDocument
from vllm_repo.validate.rules.common import did_you_mean, fixes
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule

_UNKNOWN_FIELD = re.compile(r'Message type "inference\.(\w+)" has no field named "(\w+)"')
_UNKNOWN_VALUE = re.compile(r'Enum type "inference\.([\w.]+)" has no value named (\w+)')


def _parsed(model: ModelDirectory) -> PbtxtDocument | None:
    doc = model.config
    return doc if doc is not None and doc.config is not None else None


def _vllm_config(model: ModelDirectory) -> PbtxtDocument | None:
    doc = _parsed(model)
    return doc if doc is not None and doc.config.backend == "vllm" else None


@rule("VR201", "config-syntax", Severity.ERROR)
def config_syntax(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """config.pbtxt is not valid protobuf text for Triton's ModelConfig (syntax errors, unknown fields).

    Triton parses config.pbtxt as the protobuf text format of its ModelConfig message and does not load a model whose
    file fails to parse. A misspelled field name is an unknown field, and a misspelled enum value (TYPE_BOOLEAN) an
    unknown value, both parse errors too; the hint names the closest real one.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        instance_groups [ { count: 1 kind: KIND_MODEL } ]
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = model.config
    if doc is None or doc.problem is None:
        return
    message, hint = doc.problem.message, "see Triton's model configuration docs (model_config.proto)"
    unknown = _UNKNOWN_FIELD.search(message)
    if unknown:
        message_type, field = unknown.groups()
        descriptor = getattr(_pb2(), message_type, None)
        names = [f.name for f in descriptor.DESCRIPTOR.fields] if descriptor is not None else []
        near = did_you_mean(field, names, cutoff=0.6)
        message = f"unknown field '{field}' in {message_type}"
        hint = f"did you mean '{near}'?" if near else f"{message_type} has: {', '.join(names)}"
    unknown = _UNKNOWN_VALUE.search(message)
    if unknown:  # TYPE_BOOLEAN for TYPE_BOOL
        enum_type, value = unknown.groups()
        enum: object = _pb2()
        for part in enum_type.split("."):
            enum = getattr(enum, part, None)
        values = list(enum.keys()) if hasattr(enum, "keys") else []
        near = did_you_mean(value, values, cutoff=0.6)
        message = f"unknown value '{value}' of {enum_type}"
        hint = f"did you mean '{near}'?" if near else f"{enum_type} has: {', '.join(values)}" if values else hint
    yield Finding(doc.path, message, doc.problem.position, hint)


def _pb2():
    from vllm_repo.repository.model_config import model_config_pb2

    return model_config_pb2()


@rule("VR202", "name-mismatch", Severity.ERROR)
def name_mismatch(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """`name` in config.pbtxt differs from the model directory.

    `name` may be left out: it defaults to the model directory's name. When it is set to anything else, Triton
    refuses to load the model.

    Example::

        # llm/config.pbtxt
        name: "qwen2.5-0.5b-instruct"
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _parsed(model)
    if doc is None or not doc.config.name or doc.config.name == model.name:
        return
    yield Finding(
        doc.path,
        f"name \"{doc.config.name}\" does not match the directory '{model.name}'; Triton refuses to load the model",
        doc.field_position("name"),
        hint=f'set name: "{model.name}" or remove the line (it defaults to the directory name)',
        fix=fixes().replace_pbtxt_field(
            doc, "name", json.dumps(model.name), f'write name: "{model.name}"', current=doc.config.name
        ),
    )


@rule("VR203", "backend", Severity.ERROR)
def backend(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """The backend is missing, or is not the vLLM backend although the model has vLLM engine arguments.

    Triton takes the backend that runs a model from `backend` (or `platform`). A config.pbtxt with neither gives it
    nothing to run a model whose version directory holds only model.json. Any other backend is only reported as
    information, and a backend whose name does not start with "vllm" only when the model has a model.json.

    Example::

        # llm/config.pbtxt
        max_batch_size: 0
        instance_group [ { count: 1 kind: KIND_MODEL } ]
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _parsed(model)
    if doc is None:
        return
    name = doc.config.backend
    has_engine_args = bool(model.engine_args_documents()) or (model.path / "model.json").is_file()
    if not name and not doc.config.platform and model.uses_vllm_backend:  # else Triton picks it by the model file
        yield Finding(doc.path, "config.pbtxt names no backend", hint='add backend: "vllm"')
    elif name == "python" and has_engine_args:
        yield Finding(
            doc.path,
            'backend is "python": Triton runs the model\'s own model.py, which may or may not read model.json',
            doc.field_position("backend"),
            severity=Severity.INFO,
            hint='use backend: "vllm" for the vLLM backend; the vLLM checks are skipped for this model',
        )
    elif name and name != "vllm" and model.uses_vllm_backend:
        yield Finding(
            doc.path,
            f'custom backend "{name}": checked as a vLLM model, but its own contract may differ',
            doc.field_position("backend"),
            severity=Severity.INFO,
        )
    elif name and not model.uses_vllm_backend and has_engine_args:
        yield Finding(
            doc.path,
            f'backend is "{name}", which does not read model.json; the vLLM checks are skipped for this model',
            doc.field_position("backend"),
            severity=Severity.INFO,
            hint='use backend: "vllm" if model.json is meant for the vLLM backend',
        )


@rule("VR204", "decoupled-false", Severity.ERROR)
def decoupled_false(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """`decoupled: false` set explicitly: the vLLM backend streams and needs the decoupled transaction policy.

    The backend sends each request's output as a stream of responses, which Triton allows only under the decoupled
    transaction policy, so it fails to load a model configured with decoupled: false. Leaving
    model_transaction_policy out is fine: the backend's auto-complete sets decoupled: true.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        model_transaction_policy { decoupled: false }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _vllm_config(model)
    if doc is None or not doc.has_field("model_transaction_policy"):
        return
    if not doc.config.model_transaction_policy.decoupled:
        yield Finding(
            doc.path,
            "model_transaction_policy sets decoupled false; the vLLM backend only works decoupled",
            doc.field_position("decoupled") or doc.field_position("model_transaction_policy"),
            hint="set decoupled: true, or remove model_transaction_policy (the backend fills it in)",
            fix=fixes().replace_pbtxt_field(doc, "decoupled", "true", "write decoupled: true"),
        )


@rule("VR205", "max-batch-size", Severity.ERROR)
def max_batch_size(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A nonzero max_batch_size: vLLM batches itself and the backend's tensors have no batch dimension.

    With max_batch_size above 0, Triton adds a leading batch dimension to every input and output, so the tensors no
    longer have the shapes of the backend's contract (text_input is [1]). vLLM batches concurrent requests itself.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        max_batch_size: 8
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _vllm_config(model)
    if doc is None or doc.config.max_batch_size == 0:
        return
    yield Finding(
        doc.path,
        f"max_batch_size is {doc.config.max_batch_size}; the vLLM backend requires 0 "
        "(vLLM does its own continuous batching)",
        doc.field_position("max_batch_size"),
        hint="set max_batch_size: 0 or remove the line",
        fix=fixes().replace_pbtxt_field(doc, "max_batch_size", "0", "write max_batch_size: 0"),
    )


def _dims(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _dtype_name(value: int) -> str:
    return _pb2().DataType.Name(value)


@rule("VR206", "io-contract", Severity.ERROR)
def io_contract(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """Inputs and outputs listed in config.pbtxt must be ones the vLLM backend knows, with its types.

    The backend reads its inputs (text_input, stream, sampling_parameters, ...) and writes its outputs (text_output,
    ...) by name, each with a fixed data_type and shape. A tensor it doesn't know is never read or written, and a
    known one declared with another data_type makes the backend's auto-complete reject the configuration at load.
    Inputs the contract makes optional must say optional: true (a warning otherwise).

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        input [
          { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
          { name: "stream" data_type: TYPE_STRING dims: [ 1 ] optional: true }
        ]
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _vllm_config(model)
    if doc is None:
        return
    sections = (
        ("input", doc.config.input, contract.INPUTS_BY_NAME),
        ("output", doc.config.output, contract.OUTPUTS_BY_NAME),
    )
    for kind, tensors, known in sections:
        section = doc.field_position(kind)
        section_line = section.line if section else 1
        for tensor in tensors:
            where = doc.find(rf"\bname\s*:\s*[\"']{re.escape(tensor.name)}[\"']", section_line)
            spec = known.get(tensor.name)
            if spec is None:
                near = did_you_mean(tensor.name, known, cutoff=0.6)
                yield Finding(
                    doc.path,
                    f"{kind} '{tensor.name}' is not part of the vLLM backend's contract; the "
                    f"backend never reads it"
                    + ("" if kind == "output" else " and clients following the contract will not send it"),
                    where,
                    hint=f"did you mean '{near}'?" if near else f"known {kind}s: {', '.join(known)}",
                )
                continue
            if _dtype_name(tensor.data_type) != spec.data_type:
                yield Finding(
                    doc.path,
                    f"{kind} '{tensor.name}' has data_type {_dtype_name(tensor.data_type)}; the "
                    f"backend uses {spec.data_type}",
                    where,
                    hint=f"set data_type: {spec.data_type}",
                )
            dims = _dims(tensor.dims)
            if len(dims) != 1 or not (dims[0] == -1 or dims[0] >= 1):
                yield Finding(
                    doc.path,
                    f"{kind} '{tensor.name}' has dims {list(dims)}; the backend exchanges one value per request",
                    where,
                    hint=f"set dims: {list(spec.dims)}",
                )
            if kind == "input" and spec.optional and not tensor.optional:
                yield Finding(
                    doc.path,
                    f"input '{tensor.name}' is not marked optional, so every request must send it",
                    where,
                    severity=Severity.WARNING,
                    hint="add optional: true",
                )


@rule("VR207", "instance-group", Severity.WARNING)
def instance_group(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """instance_group settings that load the engine more than once or on the wrong device.

    Every instance of a vLLM model starts a complete engine with its own copy of the weights and its own KV cache,
    while one engine already batches concurrent requests. Also reported: KIND_CPU (vLLM still uses the GPUs), gpus
    listed with KIND_MODEL (Triton ignores them), and duplicate or negative GPU ids or counts (errors).

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        instance_group [ { count: 2 kind: KIND_MODEL } ]
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _vllm_config(model)
    if doc is None:
        return
    kinds = _pb2().ModelInstanceGroup.Kind
    for index, group in enumerate(doc.config.instance_group):
        where = doc.field_position("instance_group")
        kind = kinds.Name(group.kind)
        if group.count > 1:
            yield Finding(
                doc.path,
                f"instance_group[{index}] has count {group.count}: each instance starts its own "
                "vLLM engine with the full model and its own KV cache",
                where,
                hint="use count: 1; vLLM batches concurrent requests itself",
            )
        if group.count < 0:
            yield Finding(
                doc.path,
                f"instance_group[{index}] count {group.count} is negative",
                where,
                severity=Severity.ERROR,
                hint="use count: 1",
            )
        if kind == "KIND_CPU":
            yield Finding(
                doc.path,
                "KIND_CPU instance: the vLLM engine still uses the GPUs it sees; Triton's kind "
                "only decides where the Python stub runs",
                where,
                severity=Severity.INFO,
                hint="use KIND_MODEL and let vLLM place the model",
            )
        if kind == "KIND_MODEL" and len(group.gpus):
            yield Finding(
                doc.path,
                f"instance_group[{index}] lists gpus with KIND_MODEL; Triton ignores them",
                where,
                hint="use KIND_GPU with gpus: [...] to pin a single-GPU engine, or set "
                "CUDA_VISIBLE_DEVICES for the server",
            )
        if len(set(group.gpus)) != len(group.gpus) or any(g < 0 for g in group.gpus):
            yield Finding(
                doc.path,
                f"instance_group[{index}] gpus {list(group.gpus)} has duplicates or negative ids",
                where,
                severity=Severity.ERROR,
                hint="list each GPU id once",
            )


@rule("VR208", "backend-parameters", Severity.WARNING)
def backend_parameters(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """config.pbtxt `parameters`: the backend's known keys with valid values; engine arguments don't belong here.

    The backend reads only REPORT_CUSTOM_METRICS, ENABLE_VLLM_HEALTH_CHECK and STREAM_ONE_RESPONSE_PER_TOKEN ("true" or
    "false"), DEFAULT_MAX_TOKENS (a positive integer) and GPU_DEVICE_IDS from config.pbtxt's parameters and ignores
    every other key. vLLM engine arguments take effect only in <version>/model.json.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        parameters { key: "max_model_len" value: { string_value: "8192" } }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    doc = _vllm_config(model)
    if doc is None:
        return
    for key, value in doc.config.parameters.items():
        where = doc.find(rf"[\"']?\bkey\b[\"']?\s*:\s*[\"']{re.escape(key)}[\"']") or doc.find(
            rf"[\"']{re.escape(key)}[\"']"
        )
        text = value.string_value.strip()
        if key in contract.BOOLEAN_PARAMETERS:
            if text.lower() not in contract.TRUE_STRINGS | contract.FALSE_STRINGS:
                yield Finding(
                    doc.path,
                    f'parameter {key} is "{value.string_value}", not a boolean',
                    where,
                    severity=Severity.ERROR,
                    hint='use string_value: "true" or "false"',
                )
        elif key in contract.INTEGER_PARAMETERS:
            if not text.isdigit() or int(text) < 1:
                yield Finding(
                    doc.path,
                    f'parameter {key} is "{value.string_value}", not a positive integer',
                    where,
                    severity=Severity.ERROR,
                    hint='e.g. string_value: "512"',
                )
        elif key in contract.STRING_PARAMETERS:
            continue  # GPU_DEVICE_IDS: VR507 and VR508 read it
        elif ctx.schema is not None and ctx.schema.get(key) is not None:
            yield Finding(
                doc.path,
                f"parameter '{key}' is a vLLM engine argument; the vLLM backend ignores engine "
                f"arguments in config.pbtxt",
                where,
                hint=f'set "{key}" in <version>/model.json instead',
            )
        else:
            near = did_you_mean(key, contract.KNOWN_PARAMETERS, cutoff=0.7)
            yield Finding(
                doc.path,
                f"parameter '{key}' is not read by the vLLM backend",
                where,
                severity=Severity.WARNING if near else Severity.INFO,
                hint=f"did you mean '{near}'?"
                if near
                else f"the backend reads: {', '.join(contract.KNOWN_PARAMETERS)}",
            )
