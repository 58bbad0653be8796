"""What bench sends: synthetic prompts of a given length, or the lines of a dataset file.

Synthetic prompts are random English words, each prompt its own (no shared prefix for a prefix cache to reuse). With
the server's tokenizer (vLLM's /tokenize, which the bundled backend answers) a prompt is cut or grown until the
server counts exactly ``input_len`` tokens for it, special tokens included, as vLLM's random dataset makes its
prompts; without it (a server that does not tokenize) each word counts as one token and the lengths are approximate,
which the report says.

A dataset is JSON Lines in vLLM's custom-dataset form, so one file drives both bench and `vllm bench serve`:
``{"prompt": "...", "output_tokens": 128}`` per line, output_tokens optional where --output-len is given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from pathlib import Path

from vllm_repo.benchmark.clients import Tokenizer
from vllm_repo.benchmark.errors import BenchError

# Common short words: nearly every tokenizer has each as one token after a space, so the first guess is close.
_WORD_TEXT = (
    "the of and to in is was for on are with as by at from his her they have this that had not but what all were "
    "when we there can an your which their said if will each about how up out them then she many some so these "
    "would other into has more two like him see time could no make than first been its who now people my made over "
    "did down only way find use may water long little very after words called just where most know get through back "
    "much before go good new write our used me man too any day same right look think also around another came come "
    "work three word must because does part even place well such here take why help put different away again off "
    "went old number great tell men say small every found still between name should home big give air line set own "
    "under read last never us left end along while might next sound below saw something thought both few those "
    "always show large often together asked house world going want school important until form food keep children"
)
WORDS = tuple(_WORD_TEXT.split())
# Prompts tokenized at once while they are made (each takes two or three round trips to the server).
TOKENIZE_CONCURRENCY = 16
# Rounds of cutting or growing a prompt before its length counts as out of reach.
FIT_ROUNDS = 8


@dataclasses.dataclass(frozen=True)
class Prompt:
    text: str
    output_len: int


@dataclasses.dataclass
class PromptSet:
    prompts: list[Prompt]
    source: str  # "exact" (synthetic, the server's token count), "approximate" (synthetic, words), or the dataset path
    note: str | None = None  # said to the user when it matters (approximate lengths, a dataset reused)


async def synthetic_prompts(
    count: int, input_len: int, output_len: int, seed: int, tokenizer: Tokenizer | None
) -> PromptSet:
    """``count`` distinct prompts of ``input_len`` tokens, each asking for ``output_len``."""
    rng = random.Random(seed)
    drafts = [rng.choices(WORDS, k=max(input_len, 1)) for _ in range(count)]
    if tokenizer is not None:
        try:
            special = len(await tokenizer.encode("", True))
        except Exception:  # the server has no /tokenize for this model (a stock backend): fall back
            special = None
        if special is not None:
            if input_len <= special:
                raise BenchError(
                    f"--input-len {input_len} leaves no room for a prompt: the model's tokenizer adds {special} "
                    "special token(s) to every prompt"
                )
            limit = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

            async def fit(words: list[str], index: int) -> str:
                async with limit:
                    return await fit_prompt(words, input_len, special, tokenizer, random.Random(seed * 7919 + index))

            texts = await asyncio.gather(*(fit(words, i) for i, words in enumerate(drafts)))
            return PromptSet([Prompt(t, output_len) for t in texts], "exact")
    # One token per word, less one for a beginning-of-sequence token most tokenizers add.
    texts = [" ".join(words[: max(input_len - 1, 1)]) for words in drafts]
    return PromptSet(
        [Prompt(t, output_len) for t in texts],
        "approximate",
        note="the server offers no tokenizer (/tokenize): prompts are one word per intended token, so their lengths "
        "are approximate; input_tokens_mean shows what the server counted",
    )


async def fit_prompt(words: list[str], input_len: int, special: int, tokenizer: Tokenizer, rng: random.Random) -> str:
    """``words`` cut or grown until the tokenizer counts ``input_len`` tokens with its special tokens. Cutting goes
    through the token ids (decode the first ones) since a word may be several tokens; a decoded text can encode to
    other tokens again, hence the rounds."""
    content = input_len - special
    text = " ".join(words)
    for _ in range(FIT_ROUNDS):
        if len(await tokenizer.encode(text, True)) == input_len:
            return text
        ids = await tokenizer.encode(text, False)
        if len(ids) > content:
            text = await tokenizer.decode(ids[:content])
        else:
            text = text + " " + " ".join(rng.choices(WORDS, k=content - len(ids)))
    raise BenchError(
        f"could not make a prompt of exactly {input_len} tokens with the model's tokenizer in {FIT_ROUNDS} rounds",
        hint="try another --input-len or --seed, or give prompts with --dataset",
    )


def load_dataset(path: Path, output_len: int | None) -> list[Prompt]:
    """The prompts of a JSON Lines file; ``output_len`` (--output-len) replaces each line's output_tokens."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BenchError(f"{path}: cannot read the dataset ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise BenchError(f"{path}: the dataset is not UTF-8 text") from None
    prompts = []
    example = '{"prompt": "...", "output_tokens": 128}'
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise BenchError(f"{path}:{number}: not JSON ({exc})", hint=f"one object a line, e.g. {example}") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"]:
            raise BenchError(f'{path}:{number}: no "prompt" string', hint=f"one object a line, e.g. {example}")
        tokens = output_len if output_len is not None else item.get("output_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise BenchError(
                f"{path}:{number}: output_tokens must be a positive whole number"
                + ("" if "output_tokens" in item else " and is missing"),
                hint="give it on every line, or --output-len N for all of them",
            )
        prompts.append(Prompt(item["prompt"], tokens))
    if not prompts:
        raise BenchError(f"{path}: the dataset has no prompts", hint=f"one object a line, e.g. {example}")
    return prompts


def take(prompts: list[Prompt], start: int, count: int) -> list[Prompt]:
    """``count`` prompts from ``start`` on, wrapping around at the end."""
    return [prompts[(start + i) % len(prompts)] for i in range(count)]
