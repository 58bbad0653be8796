"""No input makes validate crash: thousands of malformed model.json, config.pbtxt and multi_lora.json files.

Every outcome must be a list of well-formed Diagnostics (or a clean pass), never an exception, and a file that
is not even parseable must always be reported as an error on that file. Each example writes the files into one
model repository that is reused across examples; the other files of the model stay valid and are chosen so that
every rule family (cross-model GPU sharing, LoRA, metrics) reads the fuzzed file.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity
from vllm_repo.diagnostics.reporters import REPORTERS
from vllm_repo.repository.model_config import model_config_pb2
from vllm_repo.schema.loader import load_schema
from vllm_repo.validate import PathError, ValidationResult, validate_paths
from vllm_repo.validate.rules.vr3_model_json import RANGES

VERSION = "0.32.0"
SCHEMA = load_schema(VERSION)
KEYS = sorted(SCHEMA.fields)
# Real model repositories to mutate, when present (the same collection the real-world test reads).
REALWORLD = Path(
    os.environ.get("VLLM_REPO_REALWORLD_REPOS")
    or Path(__file__).resolve().parents[3] / "shared" / "data" / "realworld_repos"
)

# VLLM_REPO_FUZZ_SCALE=10 for a longer hunt; the default keeps this file at about a minute (the hunts are marked slow:
# `-m "not slow"` leaves them out of a quick run, and the default run, CI's, has them).
SCALE = float(os.environ.get("VLLM_REPO_FUZZ_SCALE", "1"))
FUZZ = settings(
    max_examples=int(1500 * SCALE),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

RICH_CONFIG = """\
name: "llm"
backend: "vllm"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_MODEL } ]
parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
parameters: { key: "max_sessions" value: { string_value: "8" } }
"""
PEER_CONFIG = 'backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]\n'
HF_MODEL = "@local-hf-model@"  # replaced by the path of a local model directory with a Hugging Face config.json
GOOD_HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {"rope_type": "linear", "factor": 2.0},
}
GOOD_ARGS = {
    "model": HF_MODEL,
    "gpu_memory_utilization": 0.4,
    "enable_lora": True,
    "tensor_parallel_size": 1,
    "disable_log_stats": True,
    "max_model_len": 2048,
    "dtype": "bfloat16",
}
GOOD_LORA = {"alpaca": "/vllm_workspace/loras/alpaca", "sql": "org/sql-lora"}


def _realworld(name: str, limit: int = 40) -> list[str]:
    if not REALWORLD.is_dir():
        return []
    found = []
    for path in sorted(REALWORLD.rglob(name))[:limit]:
        try:
            found.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return found


SEED_CONFIGS = [RICH_CONFIG, PEER_CONFIG, *_realworld("config.pbtxt")]
SEED_ARGS = [json.dumps(GOOD_ARGS, indent=2), *_realworld("model.json")]
SEED_LORAS = [json.dumps(GOOD_LORA, indent=4), *_realworld("multi_lora.json")]


class Workspace:
    """<root>/repo/llm (the fuzzed model) and <root>/repo/peer (a second model on GPU 0), rewritten per example."""

    def __init__(self, root: Path):
        self.repo = root / "repo"
        self.model = self.repo / "llm"
        self.config = self.model / "config.pbtxt"
        self.engine_args = self.model / "1" / "model.json"
        self.lora = self.model / "1" / "multi_lora.json"
        self.hf_config = root / "hf-model" / "config.json"
        (self.model / "1").mkdir(parents=True)
        self.hf_config.parent.mkdir()
        peer = self.repo / "peer"
        (peer / "1").mkdir(parents=True)
        (peer / "config.pbtxt").write_text(PEER_CONFIG)
        (peer / "1" / "model.json").write_text(json.dumps({"model": "org/peer", "gpu_memory_utilization": 0.7}))

    def write(
        self,
        *,
        config: bytes | None = None,
        engine_args: bytes | None = None,
        lora: bytes | None = None,
        hf_config: bytes | None = None,
    ):
        engine_args = json.dumps(GOOD_ARGS).encode() if engine_args is None else engine_args
        local_model = json.dumps(str(self.hf_config.parent)).encode()
        self.engine_args.write_bytes(engine_args.replace(json.dumps(HF_MODEL).encode(), local_model))
        self.config.write_bytes(RICH_CONFIG.encode() if config is None else config)
        self.lora.write_bytes(json.dumps(GOOD_LORA).encode() if lora is None else lora)
        self.hf_config.write_bytes(json.dumps(GOOD_HF_CONFIG).encode() if hf_config is None else hf_config)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("fuzz"))


def check(paths: list[Path], **options) -> ValidationResult:
    """validate_paths must return diagnostics, never raise; every reporter must render them."""
    result = validate_paths(paths, vllm_version=VERSION, **options)
    assert isinstance(result, ValidationResult)
    for d in result.diagnostics:
        assert isinstance(d, Diagnostic)
        assert d.code.startswith("VR") and d.message.strip()
        assert isinstance(d.severity, Severity)
        assert d.line is None or d.line >= 1
        assert d.column is None or (d.column >= 1 and d.line is not None)
    for render in REPORTERS.values():
        render(result, io.StringIO(), io.StringIO())
    return result


def assert_error_on(result: ValidationResult, path: Path) -> None:
    errors = [
        d
        for d in result.diagnostics
        if d.severity is Severity.ERROR
        and d.file
        and Path(d.file).name == path.name
        and Path(d.file).parent.name == path.parent.name
    ]
    assert errors, f"unparseable {path.name} passed: {[(d.code, d.file, d.message) for d in result.diagnostics]}"


def _reject(name: str):
    raise ValueError(name)


def json_object_or_none(raw: bytes):
    """What a JSON file holds if it is valid UTF-8 JSON (BOM allowed, no NaN/Infinity); None otherwise."""
    try:
        return json.loads(raw.decode("utf-8-sig"), parse_constant=_reject)
    except (ValueError, RecursionError):
        return None


# ------------------------------------------------------------------------------------------------- strategies

HUGE_NUMBERS = st.sampled_from(
    [
        "1e999",
        "-1e999",
        "9" * 400,
        "-" + "9" * 400,
        "1" + "0" * 4400,
        "1e-999",
        "NaN",
        "Infinity",
        "-Infinity",
        "nan",
        "0.0000000000000000000001",
        "-0",
        "1E+2",
    ]
)
ODD_STRINGS = [
    "",
    " ",
    "true",
    "False",
    "8k",
    "99999999999999999999k",
    "0.9",
    "1e999",
    "bf16",
    "auto",
    "fp8",
    "~nobody_here/x",
    "~",
    "a\x00b",
    "\ud800",
    "x" * 5000,
    "/" * 300,
    "a/" * 3000,
    "../../etc",
    "/",
    "org/model",
    "org/a/b",
    ".",
    '{"a": 1}',
    "[1, 2]",
    "[" * 3000,
    "KIND_GPU",
    "\u202e\u0301",
    "\n",
]
HUGE_INTS = [2**31, 2**63, -(2**63) - 1, 10**18, 10**400, -(10**400), 10**4299]
odd_strings = st.sampled_from(ODD_STRINGS) | st.text(max_size=30)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE_INTS),
    st.floats(),
    st.sampled_from([0.0, -0.0, 1.0, 1e308, -1e308, 5e-324]),
    odd_strings,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
# Keys some rule reads on its own (ranges, choices, model lookup, LoRA, GPU sharing) come up more often.
FOCUS_KEYS = sorted(
    {
        *RANGES,
        "model",
        "revision",
        "enable_lora",
        "disable_log_stats",
        "trust_remote_code",
        *(k for k, f in SCHEMA.fields.items() if f.choices),
    }
    & set(KEYS)
)
schema_keys = st.sampled_from(FOCUS_KEYS) | st.sampled_from(KEYS)
any_key = schema_keys | st.text(max_size=40) | st.sampled_from(["temperature", "gpu_memory_utilisation", "", " model"])


def deep(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "[" else ('{"a":' * depth + "1" + "}" * depth)


@st.composite
def dumped(draw, values) -> bytes:
    """JSON text in one of the ways people (and tools) write it: any indent, any key order, ASCII or not."""
    text = json.dumps(
        draw(values),
        indent=draw(st.sampled_from([None, 0, 2, 4, "\t"])),
        ensure_ascii=draw(st.booleans()),
        sort_keys=False,
    )
    return text.encode("utf-8", "surrogatepass")


@st.composite
def mutated(draw, seeds: list[str]) -> bytes:
    """A real file, then a few byte-level edits: truncation, deletion, insertion, duplication, byte flips."""
    data = bytearray(draw(st.sampled_from(seeds)).encode("utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "delete", "insert", "duplicate", "flip", "splice_token"]))
        at = draw(st.integers(0, len(data)))
        if op == "truncate":
            del data[at:]
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 20))]
        elif op == "insert":
            data[at:at] = draw(
                st.binary(min_size=1, max_size=8)
                | st.sampled_from(
                    [b"{", b"}", b"[", b"]", b":", b",", b'"', b"\\", b"#", b"\n", b"\xef\xbb\xbf", b"\xff", b"\x00"]
                )
            )
        elif op == "duplicate":
            end = min(len(data), at + draw(st.integers(1, 40)))
            data[at:at] = data[at:end]
        elif op == "flip" and data:
            index = min(at, len(data) - 1)
            data[index] ^= 1 << draw(st.integers(0, 7))
        elif op == "splice_token":
            data[at:at] = draw(st.sampled_from(PBTXT_TOKENS)).encode()
    return bytes(data)


@st.composite
def re_encoded(draw, inner) -> bytes:
    """The same content behind a BOM, in UTF-16, with invalid UTF-8 inside, or Windows line ends."""
    raw = draw(inner)
    how = draw(st.sampled_from(["utf8-bom", "utf16", "invalid-utf8", "crlf", "cr", "nul"]))
    if how == "utf8-bom":
        return b"\xef\xbb\xbf" + raw
    if how == "utf16":
        return raw.decode("utf-8", "replace").encode("utf-16")
    if how == "invalid-utf8":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])) + raw[at:]
    if how == "crlf":
        return raw.replace(b"\n", b"\r\n")
    if how == "cr":
        return raw.replace(b"\n", b"\r")
    return raw + b"\x00" * draw(st.integers(1, 3))


def _pbtxt_vocabulary() -> list[str]:
    """Every field and enum value name of Triton's ModelConfig, plus protobuf text syntax."""
    pb2 = model_config_pb2()
    names: set[str] = set()
    seen: set[str] = set()

    def walk(descriptor):
        if descriptor.full_name in seen:
            return
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            names.add(field.name)
            if field.enum_type is not None:
                names.update(v.name for v in field.enum_type.values)
            if field.message_type is not None:
                walk(field.message_type)

    walk(pb2.ModelConfig.DESCRIPTOR)
    syntax = [
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        ";",
        "<",
        ">",
        "\n",
        " ",
        "#",
        '"',
        "'",
        "-",
        ".",
        "/",
        '"vllm"',
        '"llm"',
        "'python'",
        '"\\x"',
        '"\\',
        '"\\u12"',
        '"\\777"',
        "true",
        "false",
        "True",
        "t",
        "0",
        "-1",
        "1",
        "18446744073709551616",
        "-9223372036854775809",
        "1e999",
        "-inf",
        "nan",
        "0x1F",
        "1.5",
        "[type.googleapis.com/inference.ModelConfig]",
        "[ext]",
        "key",
        "value",
        "string_value",
    ]
    return sorted(names) + syntax


PBTXT_TOKENS = _pbtxt_vocabulary()
pbtxt_token_soup = st.lists(st.sampled_from(PBTXT_TOKENS), max_size=60).map(" ".join).map(str.encode)


@st.composite
def structured_config(draw) -> bytes:
    """A config.pbtxt that parses (mostly), with odd values in every field the rules read."""
    ints = st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 9)
    names = st.sampled_from(
        [
            "text_input",
            "stream",
            "sampling_parameters",
            "exclude_input_in_output",
            "return_num_output_tokens",
            "text_output",
            "max_tokens",
            "prompt",
            "",
        ]
    ) | st.text(max_size=8)
    dtypes = st.sampled_from(["TYPE_STRING", "TYPE_BOOL", "TYPE_INT32", "TYPE_FP16", "TYPE_INVALID", "TYPE_UINT64"])

    def tensor() -> str:
        dims = draw(st.lists(ints, max_size=4))
        return (
            f"{{ name: {json.dumps(draw(names))} data_type: {draw(dtypes)} dims: {dims} "
            f"optional: {str(draw(st.booleans())).lower()} }}"
        )

    lines = []
    if draw(st.booleans()):
        lines.append(f"name: {json.dumps(draw(st.sampled_from(['llm', 'LLM', '', 'other']) | st.text(max_size=12)))}")
    backend = draw(st.sampled_from(["vllm", "python", "", "vllm_custom", "onnxruntime"]) | st.text(max_size=8))
    lines.append(f"backend: {json.dumps(backend)}")
    if draw(st.booleans()):
        lines.append(f"max_batch_size: {draw(st.integers(-(2**31), 2**31 - 1))}")
    if draw(st.booleans()):
        lines.append(f"model_transaction_policy {{ decoupled: {str(draw(st.booleans())).lower()} }}")
    for section in ("input", "output"):
        if draw(st.booleans()):
            lines.append(f"{section} [ " + ", ".join(tensor() for _ in range(draw(st.integers(0, 4)))) + " ]")
    groups = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"]))
        gpus = draw(st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(-1, 3), max_size=5))
        groups.append(f"{{ count: {draw(st.integers(-(2**31), 2**31 - 1))} kind: {kind} gpus: {gpus} }}")
    if groups:
        lines.append("instance_group [ " + ", ".join(groups) + " ]")
    keys = st.sampled_from(
        [
            "REPORT_CUSTOM_METRICS",
            "ENABLE_VLLM_HEALTH_CHECK",
            "max_sessions",
            "gpu_memory_utilization",
            "REPORT_CUSTOM_METRIC",
            "",
        ]
    ) | st.text(max_size=12)
    for _ in range(draw(st.integers(0, 4))):
        value = draw(
            st.sampled_from(["true", "FALSE", "yes", "", "512", "-1", "0", "9" * 40, " 1 "]) | st.text(max_size=12)
        )
        lines.append(f"parameters {{ key: {json.dumps(draw(keys))} value: {{ string_value: {json.dumps(value)} }} }}")
    order = draw(st.permutations(lines))
    return "\n".join(order).encode("utf-8", "surrogatepass")


engine_args_files = st.one_of(
    st.binary(max_size=300),
    dumped(st.dictionaries(any_key, json_values, max_size=8)),
    dumped(st.dictionaries(schema_keys, json_values, min_size=1, max_size=12)),
    dumped(st.builds(lambda extra: {**GOOD_ARGS, **extra}, st.dictionaries(schema_keys, json_values, max_size=4))),
    dumped(json_values),
    st.builds(lambda key, number: f'{{"model": "m", "{key}": {number}}}'.encode(), schema_keys, HUGE_NUMBERS),
    mutated(SEED_ARGS),
    re_encoded(
        dumped(st.builds(lambda extra: {**GOOD_ARGS, **extra}, st.dictionaries(schema_keys, json_values, max_size=3)))
    ),
    st.builds(
        lambda depth, kind: f'{{"model": "m", "quantization": {deep(depth, kind)}}}'.encode(),
        st.integers(1, 3000),
        st.sampled_from(["[", "{"]),
    ),
)

config_files = st.one_of(
    st.binary(max_size=300),
    pbtxt_token_soup,
    structured_config(),
    mutated(SEED_CONFIGS),
    re_encoded(structured_config()),
    re_encoded(st.sampled_from(SEED_CONFIGS).map(str.encode)),
    st.builds(lambda depth: ("model_transaction_policy {" * depth + "}" * depth).encode(), st.integers(1, 3000)),
)

lora_files = st.one_of(
    st.binary(max_size=200),
    dumped(json_values),
    dumped(st.dictionaries(st.text(max_size=20), json_values, max_size=6)),
    dumped(st.dictionaries(st.text(max_size=20), odd_strings, max_size=6)),
    mutated(SEED_LORAS),
    re_encoded(st.sampled_from(SEED_LORAS).map(str.encode)),
)


numbers = st.one_of(st.integers(), st.sampled_from(HUGE_INTS), st.floats(), st.integers(-3, 64))
rope = st.fixed_dictionaries(
    {},
    optional={
        "rope_type": st.sampled_from(["linear", "dynamic", "yarn", "llama3", "longrope", "su", "default"])
        | json_scalars,
        "type": st.sampled_from(["linear", "yarn"]) | json_scalars,
        "factor": numbers | json_values,
        "original_max_position_embeddings": numbers | json_values,
    },
)
hf_fields = {
    "max_position_embeddings": numbers | json_values,
    "n_positions": numbers,
    "seq_length": numbers,
    "num_attention_heads": numbers | json_values,
    "n_head": numbers,
    "num_key_value_heads": numbers,
    "rope_scaling": rope | json_values,
    "rope_parameters": rope,
}
hf_dicts = st.fixed_dictionaries({}, optional=hf_fields)
hf_config_files = st.one_of(
    st.binary(max_size=200),
    dumped(hf_dicts),
    dumped(st.builds(lambda inner, key: {key: inner}, hf_dicts, st.sampled_from(["text_config", "llm_config"]))),
    dumped(json_values),
    mutated([json.dumps(GOOD_HF_CONFIG, indent=2)]),
)
# The engine arguments that the Hugging Face config is checked against.
args_against_hf = st.fixed_dictionaries(
    {"model": st.just(HF_MODEL)},
    optional={
        "max_model_len": numbers | json_scalars,
        "tensor_parallel_size": numbers | json_scalars,
        "pipeline_parallel_size": numbers,
        "gpu_memory_utilization": numbers,
        "max_num_seqs": numbers,
        "dtype": json_scalars,
        "quantization": json_scalars,
        "kv_cache_dtype": json_scalars,
        "revision": json_scalars,
    },
).map(lambda d: json.dumps(d).encode("utf-8", "surrogatepass"))


# ------------------------------------------------------------------------------------------------------- tests


@pytest.mark.slow
@FUZZ
@given(raw=engine_args_files)
def test_model_json_never_crashes(workspace: Workspace, raw: bytes):
    workspace.write(engine_args=raw)
    whole = check([workspace.repo])
    single = check([workspace.engine_args])  # the way pre-commit calls it
    data = json_object_or_none(raw)
    if not isinstance(data, dict):
        assert_error_on(whole, workspace.engine_args)
        assert_error_on(single, workspace.engine_args)


@pytest.mark.slow
@settings(FUZZ, max_examples=int(1200 * SCALE))
@given(raw=config_files)
def test_config_pbtxt_never_crashes(workspace: Workspace, raw: bytes):
    from google.protobuf import text_format

    workspace.write(config=raw)
    whole = check([workspace.repo])
    check([workspace.config])
    try:
        text_format.Parse(raw.decode("utf-8-sig"), model_config_pb2().ModelConfig())
    except Exception:
        assert_error_on(whole, workspace.config)


@pytest.mark.slow
@settings(FUZZ, max_examples=int(600 * SCALE))
@given(raw=lora_files)
def test_multi_lora_json_never_crashes(workspace: Workspace, raw: bytes):
    workspace.write(lora=raw)
    whole = check([workspace.repo])
    check([workspace.lora])
    data = json_object_or_none(raw)
    if not isinstance(data, dict) or not all(isinstance(v, str) and v.strip() for v in data.values()):
        assert_error_on(whole, workspace.lora)


@pytest.mark.slow
@settings(FUZZ, max_examples=int(400 * SCALE))
@given(raw=hf_config_files, engine_args=args_against_hf)
def test_local_hugging_face_config_never_crashes(workspace: Workspace, raw: bytes, engine_args: bytes):
    """`model` names a local directory: its config.json (any content) is read for the context-length and
    attention-head checks."""
    workspace.write(hf_config=raw, engine_args=engine_args)
    check([workspace.repo])
    check([workspace.repo], gpu="L4", num_gpus=2)  # and the memory estimate on that config (VR6xx)


EDGE_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2**63,
    -(2**63),
    10**400,
    -(10**400),
    0.5,
    1e308,
    -1e308,
    1e-320,
    math.inf,
    -math.inf,
    "",
    "true",
    "8k",
    "bf16",
    "auto",
    "~nobody_here/x",
    "x" * 5000,
    "a\x00b",
    "\ud800",
    [],
    [1, "a", None],
    {},
    {"a": {"b": [1]}},
    json.loads(deep(200, "[")),
]


@pytest.mark.parametrize("value", EDGE_VALUES, ids=lambda v: type(v).__name__ + ":" + repr(v)[:20])
def test_every_engine_arg_accepts_any_value_without_crashing(workspace: Workspace, value):
    """Every key of the schema set to one value of each JSON type: all at once, and with a sound `model`."""
    every = dict.fromkeys(KEYS, value)
    for data in (every, {**every, "model": "org/model"}):
        workspace.write(engine_args=json.dumps(data).encode("utf-8", "surrogatepass"))
        result = check([workspace.repo])
        assert result.diagnostics  # no single value is valid for all of them


@pytest.mark.parametrize("depth", [10, 900, 1000, 5000, 100_000])
@pytest.mark.parametrize("kind", ["[", "{"])
def test_deeply_nested_files_are_reported_not_crashed(workspace: Workspace, depth: int, kind: str):
    nested = deep(depth, kind).encode()
    workspace.write(engine_args=nested)
    assert_error_on(check([workspace.repo]), workspace.engine_args)  # an array, or an object without "model"
    workspace.write(lora=nested)
    assert_error_on(check([workspace.repo]), workspace.lora)
    workspace.write(config=b"model_transaction_policy {" * depth + b"}" * depth)
    assert_error_on(check([workspace.repo]), workspace.config)  # ModelTransactionPolicy has no such field


NAMES = st.sampled_from(
    [
        "llm",
        "peer",
        "1",
        "2",
        "01",
        "0",
        "1.0",
        "\u0661",
        "model_v1",
        "config.pbtxt",
        "model.json",
        "multi_lora.json",
        "config.pbxt",
        ".DS_Store",
        "__pycache__",
        "a b",
        "\u00fcn",
        "-x",
        "x" * 50,
    ]
) | st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=40)
ENTRY_KINDS = ["dir", "config", "engine_args", "lora", "junk", "loop", "dangling", "empty"]


@st.composite
def layouts(draw) -> list[tuple[tuple[str, ...], str]]:
    """Up to a dozen entries at depth 1-3: model files, junk, directories, symlink loops and dangling links."""
    entries = []
    for _ in range(draw(st.integers(1, 12))):
        parts = tuple(draw(st.lists(NAMES.filter(lambda n: n not in (".", "..")), min_size=1, max_size=3)))
        entries.append((parts, draw(st.sampled_from(ENTRY_KINDS))))
    return entries


def build(root: Path, entries) -> list[Path]:
    contents = {
        "config": RICH_CONFIG.encode(),
        "engine_args": json.dumps(GOOD_ARGS).encode(),
        "lora": json.dumps(GOOD_LORA).encode(),
        "junk": b"\x00\xff",
        "empty": b"",
    }
    made = []
    for parts, kind in entries:
        path = root.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                path.mkdir(exist_ok=True)
            elif kind == "loop":
                path.symlink_to(path.name)
            elif kind == "dangling":
                path.symlink_to(root / "nowhere" / "model.json")
            else:
                path.write_bytes(contents[kind])
        except OSError:  # the name clashes with what an earlier entry made (a file where a directory goes)
            continue
        made.append(path)
    return made


@pytest.mark.slow
@settings(FUZZ, max_examples=int(120 * SCALE))
@given(entries=layouts())
def test_any_repository_layout_is_reported_not_crashed(tmp_path_factory, entries):
    root = tmp_path_factory.mktemp("layout")
    made = build(root, entries)
    targets = [[root], *([p] for p in made[:4] if p.exists() or p.is_symlink())]
    for paths in targets:
        try:
            check(paths)
        except PathError:
            pass  # "no model directories found" or a vanished path: a usage error (exit 2), not a crash
    shutil.rmtree(root)


def test_unencodable_text_in_findings_does_not_crash_the_cli(tmp_path):
    """A lone surrogate escape in a key and a file name that is not UTF-8 still print (escaped), exit 1."""
    model = tmp_path / "repo" / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text('{"model": "m", "\\ud800x": 1, "dtype": "\\udcff"}')
    (model / b"\xff\xfe.swp".decode("utf-8", "surrogateescape")).write_bytes(b"")
    script = Path(sys.executable).with_name("vllm-repo")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "vllm_repo"]
    for fmt in ("text", "json", "github"):
        done = subprocess.run(
            [*command, "validate", "--vllm-version", VERSION, "--format", fmt, str(tmp_path / "repo")],
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
        assert done.returncode == 1, done.stderr.decode("utf-8", "replace")
        assert b"Traceback" not in done.stderr
        assert b"VR302" in done.stdout and b"VR105" in done.stdout
