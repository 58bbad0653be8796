"""vLLM's own OpenAI app on the model's engine, built as ``vllm serve`` builds it (its argument parser, build_app,
init_app_state): ``<version>/openai.json``'s frontend options checked by vllm serve's own parser at load, and the app
built at load (or on the first OpenAI request, without openai.json or a gateway in front), less the middleware that
has nothing to act on behind the gateway."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .configuration import load_json_file
from .contract import OPENAI_FILE, OPENAI_OPTIONS_SET_BY_BACKEND, SERVE_PARSER_MODULES, SERVE_PARSER_NOT_OPTIONS
from .environment import call_with_known, import_first
from .errors import BackendConfigError, did_you_mean

# Middleware of vLLM's app left out of the backend's copy (backend_middleware), by class name.
UNSEEN_MIDDLEWARE = frozenset({"AuthenticationMiddleware", "CORSMiddleware", "PrometheusInstrumentatorMiddleware"})


def resolve_chat_template(value: Any, version_dir: str) -> Any:
    """A relative chat_template path is relative to the version directory (the value may also be a template)."""
    if isinstance(value, str) and value and not os.path.isabs(value):
        candidate = os.path.join(version_dir, value)
        if os.path.exists(candidate):
            return candidate
    return value


def load_openai_options(version_dir: str) -> dict[str, Any] | None:
    """``<version>/openai.json`` ({vllm serve frontend option: value}), or None without the file."""
    path = os.path.join(version_dir, OPENAI_FILE)
    if not os.path.exists(path):
        return None
    data = load_json_file(path, "")
    if not isinstance(data, dict):
        raise BackendConfigError(f"{path}: must be a JSON object of vllm serve frontend options")
    if "chat_template" in data:
        data["chat_template"] = resolve_chat_template(data["chat_template"], version_dir)
    return data


def _option_for(action: Any) -> str:
    # The positive spelling: BooleanOptionalAction also lists --no-X, the longest of its strings.
    longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    return max(longs or action.option_strings, key=len)


def frontend_argv(
    options: Mapping[str, Any], actions: Iterable[Any], engine_fields: Iterable[str], path: str
) -> list[str]:
    """vllm serve's command line for the frontend options of ``openai.json`` ({dest: value}), so that vLLM's own
    parser converts and checks them (names, types, choices). ``actions`` are the parser's (argparse actions);
    ``engine_fields`` are AsyncEngineArgs' fields, which belong in model.json. Raises BackendConfigError naming the
    file and the key."""
    by_dest = {a.dest: a for a in actions if a.option_strings and a.dest not in SERVE_PARSER_NOT_OPTIONS}
    engine = set(engine_fields)
    frontend = sorted(d for d in by_dest if d not in engine and d not in OPENAI_OPTIONS_SET_BY_BACKEND)
    argv: list[str] = []
    for key, value in options.items():
        if key in OPENAI_OPTIONS_SET_BY_BACKEND:
            raise BackendConfigError(f'{path}: "{key}" is set by the backend ({OPENAI_OPTIONS_SET_BY_BACKEND[key]})')
        if key in engine:
            raise BackendConfigError(f'{path}: "{key}" is an engine argument; put it in model.json')
        action = by_dest.get(key)
        if action is None:
            raise BackendConfigError(
                f'{path}: "{key}" is not a vllm serve frontend option{did_you_mean(key, frontend)}'
            )
        if value is None:
            continue
        option = _option_for(action)
        if action.nargs == 0:  # a flag: store_true/store_false, or BooleanOptionalAction's --x/--no-x
            if not isinstance(value, bool):
                raise BackendConfigError(f'{path}: "{key}" must be true or false, got {json.dumps(value)}')
            negative = next((s for s in action.option_strings if s.startswith("--no-")), None)
            if negative is not None:
                argv.append(option if value else negative)
            elif value != bool(action.default) and value == bool(action.const):
                argv.append(option)
            elif value != bool(action.default):
                raise BackendConfigError(f'{path}: "{key}" can only be {json.dumps(bool(action.const))}')
            continue
        appended = type(action).__name__ == "_AppendAction"
        many = appended or action.nargs in ("+", "*") or isinstance(action.nargs, int)
        values = value if isinstance(value, list) and many else [value]
        rendered = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if not rendered:  # [] for a list option: none of it (where the option allows none at all)
            if action.nargs == "*":
                argv.append(option)
            continue
        if appended:  # given once per value
            for item in rendered:
                argv.extend((option, item))
            continue
        argv.append(option)
        argv.extend(rendered)
    return argv


def parse_frontend_options(
    options: Mapping[str, Any], path: str, engine_fields: Iterable[str], lora_adapters: Mapping[str, str] | None
) -> Any:
    """vllm serve's argument namespace for openai.json's frontend options (the file at ``path``), parsed and checked
    by vLLM's own parser (make_arg_parser), with the adapters of multi_lora.json as its lora_modules. ImportError
    where the release keeps no parser where the backend looks."""
    make_arg_parser = import_first(SERVE_PARSER_MODULES, "make_arg_parser")
    parser_cls = import_first(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
    parser = make_arg_parser(parser_cls())

    def fail(message: str) -> None:  # argparse would print the usage and exit the stub
        raise BackendConfigError(f"{path}: {message}")

    parser.error = fail
    argv = frontend_argv(options, parser._actions, engine_fields, path)
    if lora_adapters:
        argv += ["--lora-modules", *(json.dumps({"name": n, "path": p}) for n, p in lora_adapters.items())]
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        raise BackendConfigError(f"{path}: vLLM's parser refused {argv}") from None
    try:
        validate = import_first(SERVE_PARSER_MODULES, "validate_parsed_serve_args")
    except ImportError:
        validate = None
    if validate is not None:
        try:
            validate(args)
        except (TypeError, ValueError) as exc:
            raise BackendConfigError(f"{path}: {exc}") from None
    return args


def import_app_builders() -> tuple[Any, Any]:
    """vLLM's build_app and init_app_state, where the release keeps them (ImportError where neither place has one)."""
    build_app = import_first(("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"), "build_app")
    init_app_state = import_first(
        ("vllm.entrypoints.launchers.api_server.app_state", "vllm.entrypoints.openai.api_server"), "init_app_state"
    )
    return build_app, init_app_state


async def build_openai_app(
    builders: tuple[Any, Any], args: Any, engine: Any, engine_args: Any, engine_args_class: type, model_name: str
) -> Any:
    """vLLM's app on ``engine``, serving the model as ``model_name``: ``args`` is vllm serve's namespace of frontend
    options (parse_frontend_options), ``builders`` import_app_builders()'s."""
    build_app, init_app_state = builders
    # `vllm serve` builds its app from one namespace of engine and frontend arguments: the engine's are model.json's
    # (as the engine has them: vLLM's config creation fills in some, e.g. the reasoning parser).
    for field in dataclasses.fields(engine_args_class):
        setattr(args, field.name, getattr(engine_args, field.name))
    args.served_model_name = [model_name]
    get_tasks = getattr(engine, "get_supported_tasks", None)
    tasks = tuple(await get_tasks()) if get_tasks is not None else ("generate",)
    values = {
        "args": args,
        "supported_tasks": tasks,
        "model_config": engine.model_config,
        "engine_client": engine,
        "vllm_config": getattr(engine, "vllm_config", None),
    }
    app = call_with_known(build_app, values)
    values["state"] = app.state
    # vLLM's handler for a dead engine tells its HTTP server to exit; here the backend handles the death.
    app.state.server = types.SimpleNamespace(should_exit=False)
    await call_with_known(init_app_state, values)
    # The stack is rebuilt from the list: something in vLLM's setup has already built it once.
    app.user_middleware = backend_middleware(app.user_middleware)
    app.middleware_stack = None
    return app


def backend_middleware(middleware: Sequence[Any]) -> list[Any]:
    """vLLM's app middleware (Starlette's ``Middleware`` entries) less what has nothing to act on behind the gateway,
    each of which wraps every chunk's send: the gateway authenticates and keeps the client's credentials (with
    VLLM_API_KEY set, vLLM's key check would refuse every request), the gateway answers CORS itself, and the HTTP
    metrics would go to a registry nobody scrapes. The rest (vLLM's own, openai.json's ``middleware``) stays, in
    order."""
    return [m for m in middleware if getattr(m.cls, "__name__", "") not in UNSEEN_MIDDLEWARE]
