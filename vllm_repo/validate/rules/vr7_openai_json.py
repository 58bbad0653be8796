"""VR7xx: openai.json, the vllm serve options of a model's OpenAI API (vllm-repo openai, launch --openai-port).

The backend builds vLLM's OpenAI app from these options while the model loads, with vLLM's own
argument parser: a key it refuses stops the model from serving OpenAI requests, and a key that configures vllm
serve's HTTP server does nothing, since the gateway, not the backend, is the HTTP server.
"""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo.backend.vllm_repo_backend.contract import OPENAI_OPTIONS_SET_BY_BACKEND
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import ModelDirectory
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.validate.rules.common import did_you_mean, not_one_json_object, path_exists
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule

_GATEWAY_FLAGS = "give it to `vllm-repo launch` (with --openai-port) or `vllm-repo openai` instead"
_NO_HTTP_SERVER = "it configures vllm serve's own HTTP server, which the backend does not run"
_TLS = "the gateway serves plain HTTP: terminate TLS in front of it (a reverse proxy, the ingress)"
# vllm serve options for its HTTP server (vLLM's FrontendArgs beyond BaseFrontendArgs), with what to do instead.
SERVER_OPTIONS: dict[str, str] = {
    "host": "--host of `vllm-repo launch` or `vllm-repo openai` binds the gateway",
    "port": "--openai-port of `vllm-repo launch` (--port of `vllm-repo openai`) is the gateway's port",
    "uds": _NO_HTTP_SERVER,
    "grpc_port": _NO_HTTP_SERVER,
    "allowed_origins": f"the gateway answers CORS: {_GATEWAY_FLAGS} (--allowed-origins)",
    "allow_credentials": f"the gateway answers CORS: {_GATEWAY_FLAGS} (--allow-credentials)",
    "allowed_methods": f"the gateway answers CORS: {_GATEWAY_FLAGS} (--allowed-methods)",
    "allowed_headers": f"the gateway answers CORS: {_GATEWAY_FLAGS} (--allowed-headers)",
    "ssl_keyfile": _TLS,
    "ssl_certfile": _TLS,
    "ssl_ca_certs": _TLS,
    "ssl_cert_reqs": _TLS,
    "ssl_ciphers": _TLS,
    "enable_ssl_refresh": _TLS,
    "root_path": _NO_HTTP_SERVER,
    "uvicorn_log_level": _NO_HTTP_SERVER,
    "disable_uvicorn_access_log": _NO_HTTP_SERVER,
    "disable_access_log_for_endpoints": _NO_HTTP_SERVER,
    "h11_max_incomplete_event_size": _NO_HTTP_SERVER,
    "h11_max_header_count": _NO_HTTP_SERVER,
    "disable_fastapi_docs": _NO_HTTP_SERVER,
    "enable_offline_docs": _NO_HTTP_SERVER,
    "enable_request_id_headers": "the gateway does not pass vLLM's response headers on to the client",
}


def openai_documents(model: ModelDirectory) -> Iterator[JsonDocument]:
    """Every openai.json of a vLLM model's version directories, readable or not."""
    if model.uses_vllm_backend:
        for version in model.versions:
            if version.openai_options is not None:
                yield version.openai_options


def openai_keys(model: ModelDirectory) -> Iterator[tuple[JsonDocument, str]]:
    """Each key of the openai.json files that hold a JSON object (the others are VR701's), with its file."""
    for doc in openai_documents(model):
        if doc.ok and isinstance(doc.data, dict):
            for key in doc.data:
                yield doc, key


@rule("VR701", "openai-json-syntax", Severity.ERROR)
def openai_json_syntax(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """openai.json is not valid JSON, or not a JSON object.

    The backend reads openai.json (vllm serve's options for the model's OpenAI API) when it loads the model, and
    fails to load it when the file is not one JSON object.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"tool_call_parser": "hermes",}
    """
    for doc in openai_documents(model):
        yield from not_one_json_object(
            doc,
            "openai.json must be one JSON object of vllm serve options",
            'write {"tool_call_parser": "hermes", ...}: vllm serve options by their names',
        )


@rule("VR702", "openai-option-set-by-backend", Severity.ERROR)
def openai_option_set_by_backend(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An openai.json key the backend sets itself (the backend refuses to load the model).

    The served model is model.json's model under the Triton model's name, its LoRA adapters are multi_lora.json's,
    and the gateway checks API keys: model_tag, served_model_name, lora_modules and api_key are not openai.json's.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"served_model_name": "qwen"}
    """
    for doc, key in openai_keys(model):
        if key in OPENAI_OPTIONS_SET_BY_BACKEND:
            yield Finding(
                doc.path,
                f"'{key}' is set by the backend, which refuses to load the model with it here",
                doc.position_of(key),
                hint=f"remove it: {OPENAI_OPTIONS_SET_BY_BACKEND[key]}",
            )


@rule("VR703", "openai-engine-arg", Severity.ERROR)
def openai_engine_arg(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An engine argument in openai.json (the backend refuses to load the model: it belongs in model.json).

    vllm serve takes engine arguments and its own options on one command line; the backend reads them from two
    files: model.json for the engine (checked against the chosen release's EngineArgs), openai.json for the rest.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"tool_call_parser": "hermes", "max_model_len": 4096}
    """
    for doc, key in openai_keys(model):
        if key not in OPENAI_OPTIONS_SET_BY_BACKEND and ctx.schema.get(key) is not None:
            yield Finding(
                doc.path,
                f"'{key}' is an engine argument of vLLM {ctx.schema.vllm_version}, not a vllm serve option",
                doc.position_of(key),
                hint=f"move '{key}' to model.json, beside it",
            )


@rule("VR704", "openai-server-option", Severity.WARNING)
def openai_server_option(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An openai.json option of vllm serve's HTTP server, which does nothing behind the gateway.

    The gateway (`vllm-repo openai`, `launch --openai-port`) is the HTTP server: its address, CORS, API keys and
    TLS are its own, and the backend only runs vLLM's OpenAI app behind it. vLLM accepts these options, so the model
    loads, and they are silently without effect.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"port": 9000, "allowed_origins": ["*"]}
    """
    for doc, key in openai_keys(model):
        if key in SERVER_OPTIONS:
            yield Finding(
                doc.path,
                f"'{key}' does nothing here: {SERVER_OPTIONS[key]}",
                doc.position_of(key),
                hint=f"remove '{key}' from openai.json",
            )


def _looks_like_a_path(template: object) -> bool:
    # What vLLM takes for a path rather than a template (its load_chat_template: no Jinja markup, a file name).
    if not isinstance(template, str):
        return False
    return "{" not in template and "\n" not in template and ("/" in template or template.endswith((".jinja", ".j2")))


@rule("VR705", "chat-template-missing", Severity.ERROR)
def chat_template_missing(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """openai.json's chat_template names a file that does not exist (every OpenAI request to the model then fails).

    A chat_template value is a Jinja template or the path of one, relative to the version directory; vLLM takes a
    value without Jinja markup that looks like a file name for a path, and fails when there is no such file.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"chat_template": "templates/chat.jinja"}
    """
    for doc, key in openai_keys(model):
        template = doc.data[key]
        # An absolute path joins as itself.
        if key == "chat_template" and _looks_like_a_path(template) and not path_exists(doc.path.parent / template):
            yield Finding(
                doc.path,
                f"chat_template '{template}' is no file (looked for {doc.path.parent / template})",
                doc.position_of("chat_template"),
                hint="put the template there, give its path relative to the version directory, or write the "
                "template itself",
            )


@rule("VR706", "openai-option-unknown", Severity.ERROR)
def openai_option_unknown(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An openai.json key that is no vllm serve option of the chosen release (the backend refuses to load the model).

    Most often a misspelt option: the backend checks openai.json with vLLM's parser at load. The options are those
    of vllm serve's own parser beyond EngineArgs, read from each bundled release (schemas/serve_options.json). For a
    release not read there, only a key close to a known option is reported, as a warning.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/openai.json
        {"enable_auto_tool_choice": true, "tool_call_parsr": "hermes"}
    """
    from vllm_repo.schema.serve_options import bundled_serve_options

    # Keys the backend sets (VR702) and engine arguments (VR703) are other rules' findings.
    keys = [
        (doc, key)
        for doc, key in openai_keys(model)
        if key not in OPENAI_OPTIONS_SET_BY_BACKEND and ctx.schema.get(key) is None
    ]
    if not keys:
        return
    releases = bundled_serve_options()
    release = ctx.schema.vllm_version
    options = releases.get(release)
    known = frozenset().union(*releases.values())
    for doc, key in keys:
        if options is None:  # a release whose parser was not read: only what is surely a misspelling
            close = None if key in known else did_you_mean(key, sorted(known))
            if close is not None:
                yield Finding(
                    doc.path,
                    f"'{key}' is no vllm serve option of the releases vllm-repo knows",
                    doc.position_of(key),
                    hint=f"did you mean '{close}'?",
                    severity=Severity.WARNING,
                )
        elif key not in options:
            yield Finding(
                doc.path,
                f"'{key}' is no vllm serve option of vLLM {release}: the backend refuses to load the model with it",
                doc.position_of(key),
                hint=_unknown_option_hint(key, options, releases),
            )


def _unknown_option_hint(key: str, options: frozenset[str], releases: dict[str, frozenset[str]]) -> str:
    close = did_you_mean(key, sorted(options))
    if close is not None:
        return f"did you mean '{close}'?"
    having = [key in release_options for release_options in releases.values()]
    if any(having):
        return f"vLLM {_spans(list(releases), having)} has it: choose such a release, or remove it"
    return "remove it (`vllm serve --help` lists the options)"


def _spans(releases: list[str], having: list[bool]) -> str:
    """The runs of consecutive releases that have something: "0.10.0 to 0.12.0, 0.32.0"."""
    runs: list[list[str]] = []
    for index, (release, has) in enumerate(zip(releases, having, strict=True)):
        if has:
            if index and having[index - 1]:
                runs[-1].append(release)
            else:
                runs.append([release])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]} to {run[-1]}" for run in runs)
