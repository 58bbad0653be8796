"""One streamed response per token (config.pbtxt's STREAM_ONE_RESPONSE_PER_TOKEN).

vLLM merges the tokens a stream has not read yet into one output (its DELTA output kind): whenever the backend is
still sending a stream's last response when the engine makes the next token, which happens on an idle server too.
A client that counts responses as tokens needs one response per token, so each merged output is split here into one
output per new token, in order, each with its token's id, text, logprobs and running cumulative logprob; the finish
reason and the finished flag ride on the last.

The text of each token is decoded with the model's tokenizer, after a few tokens of the completion's own context
(as vLLM's incremental detokenizer does); a token that ends inside a multi-byte character gets "" and the character
goes with the token that completes it. The pieces always add up to the text vLLM merged: where decoding disagrees
with it (stop strings, special tokens), the remainder goes with the last token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

# Tokens of the completion decoded before the new ones, so that a token's leading space or joined characters come
# out as they do inside the text.
CONTEXT_TOKENS = 6
_INCOMPLETE = "\ufffd"  # what a decoder gives for the bytes of a character not complete yet


@dataclasses.dataclass
class Piece:
    """A completion's share of one response (what native.assemble_outputs reads of vLLM's CompletionOutput)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[Any] | None
    finish_reason: str | None = None
    stop_reason: Any = None


@dataclasses.dataclass
class PieceOutput:
    """One response's output (what native.assemble_outputs reads of vLLM's RequestOutput)."""

    prompt: str | None
    prompt_token_ids: Sequence[int] | None
    outputs: list[Piece]
    finished: bool


def token_texts(
    decode: Callable[[list[int]], str], context: Sequence[int], new: Sequence[int], merged: str
) -> list[str]:
    """The text of each of ``new`` tokens, adding up to ``merged`` (vLLM's text for them all)."""
    if len(new) <= 1:
        return [merged]
    context = list(context)[-CONTEXT_TOKENS:]
    shown = decode(context) if context else ""
    texts, given = [], ""
    for i in range(1, len(new)):
        full = decode([*context, *new[:i]])
        piece = ""
        if full.startswith(shown) and not full.endswith(_INCOMPLETE):
            piece, shown = full[len(shown) :], full
        if not merged.startswith(given + piece):
            piece = ""  # decoding disagrees with vLLM's text here: the rest goes with the last token
        texts.append(piece)
        given += piece
    texts.append(merged[len(given) :])
    return texts


def decoder(engine: Any, sampling_params: Any) -> Callable[[list[int]], str]:
    """How a request's token ids are decoded into text: the engine's tokenizer, with the request's own
    skip_special_tokens."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        tokenizer = engine.get_tokenizer()
    skip = getattr(sampling_params, "skip_special_tokens", True)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=skip)


def _sampled_logprob(position: Any, token_id: int) -> float | None:
    entry = position.get(token_id) if isinstance(position, dict) else None
    return None if entry is None else entry.logprob


def split(output: Any, decode: Callable[[list[int]], str], history: MutableMapping[int, list[int]]) -> list[Any]:
    """``output`` (a vLLM RequestOutput of a stream) as one output per new token; as it is when it holds at most one
    token per completion. ``history`` holds each completion's token ids so far (by its index) and is brought up to
    date."""
    completions = list(output.outputs)
    count = max((len(c.token_ids) for c in completions), default=0)
    if count <= 1:
        for c in completions:
            history.setdefault(c.index or 0, []).extend(c.token_ids)
        return [output]
    per_completion: dict[int, list[Piece]] = {}
    for c in completions:
        index = c.index or 0
        new = list(c.token_ids)
        seen = history.setdefault(index, [])
        texts = token_texts(decode, seen, new, c.text)
        logprobs = list(c.logprobs) if c.logprobs else None
        # The running total after each token: vLLM's total after the last, less the sampled logprobs after it.
        running: list[float | None] = [c.cumulative_logprob] * len(new)
        if logprobs is not None and c.cumulative_logprob is not None and len(logprobs) == len(new):
            total = c.cumulative_logprob
            for i in range(len(new) - 1, -1, -1):
                running[i] = total
                sampled = _sampled_logprob(logprobs[i], new[i])
                total = total - sampled if sampled is not None else total
        pieces = [
            Piece(
                index,
                texts[i],
                [token],
                running[i],
                [logprobs[i]] if logprobs is not None and i < len(logprobs) else None,
            )
            for i, token in enumerate(new)
        ]
        if pieces:
            pieces[-1].finish_reason, pieces[-1].stop_reason = c.finish_reason, getattr(c, "stop_reason", None)
        per_completion[index] = pieces
        seen.extend(new)
    return [
        PieceOutput(
            output.prompt,
            output.prompt_token_ids,
            [pieces[i] for pieces in per_completion.values() if i < len(pieces)],
            bool(output.finished) and i == count - 1,
        )
        for i in range(count)
    ]
