"""`vllm-repo infer`: options in, infer.infer out; text is printed as it arrives."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from vllm_repo.serve.errors import InferError
from vllm_repo.serve.infer import DEFAULT_MAX_TOKENS
from vllm_repo.serve.ports import DEFAULT_URL


def infer(
    model: Annotated[str, typer.Argument(help="Model name (its directory in the repository).")],
    prompt: Annotated[str, typer.Argument(help="The prompt.")],
    url: Annotated[str, typer.Option("--url", help="Triton's HTTP address.")] = DEFAULT_URL,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Most tokens to generate.")] = DEFAULT_MAX_TOKENS,
    no_stream: Annotated[bool, typer.Option("--no-stream", help="Wait for the whole completion (generate).")] = False,
    params: Annotated[
        list[str] | None, typer.Option("--param", metavar="KEY=VALUE", help="Sampling parameter, e.g. temperature=0.7.")
    ] = None,
    show_outputs: Annotated[
        bool, typer.Option("--show-outputs", help="Print finish reason and token counts after.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (text and outputs) at the end.")
    ] = False,
    wait: Annotated[
        float,
        typer.Option("--wait", help="Seconds to wait for the model to be ready first (a launch still loading it)."),
    ] = 0.0,
) -> None:
    """Send PROMPT to MODEL and print the completion as it streams in."""
    from vllm_repo.serve import infer as client

    streamed = []
    # On a terminal, control characters in the text are shown escaped; piped, the text is passed on as it came.
    shown = client.terminal_safe if sys.stdout.isatty() else str

    def write(piece: str) -> None:
        streamed.append(piece)
        sys.stdout.write(shown(piece))
        sys.stdout.flush()

    def progress(message: str) -> None:
        typer.echo(message, err=True)

    sampling = dict(client.parse_param(p) for p in params or [])
    try:
        completion = client.infer(
            model,
            prompt,
            url=url,
            max_tokens=max_tokens,
            stream=not no_stream,
            params=sampling,
            on_text=None if json_output else write,
            wait=wait,
            on_wait=progress,
        )
    except InferError:
        if streamed:
            sys.stdout.write("\n")  # end the text streamed so far before the error
        raise
    if json_output:
        typer.echo(json.dumps({"text": completion.text, **completion.outputs()}))
        return
    sys.stdout.write("\n")
    if show_outputs:
        o = completion.outputs()
        typer.echo(
            f"[finish_reason={o['finish_reason']} input_tokens={o['num_input_tokens']} "
            f"output_tokens={o['num_output_tokens']} responses={o['responses']}]",
            err=True,
        )
