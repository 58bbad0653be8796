"""Build a tiny random-weight causal LM and a byte-level BPE tokenizer, offline, in a few seconds.

    python scripts/make_tiny_model.py OUT_DIR [--arch llama|qwen2] [--seed 0] [--lora ADAPTER_DIR]

Run it with a Python that has torch, transformers and tokenizers (the serving environment from
.ci/setup-serving.sh). OUT_DIR gets config.json, model.safetensors, generation_config.json and the tokenizer files:
a complete Hugging Face model directory that vLLM loads with ``"model": "OUT_DIR"``.

The text it generates is noise, but every serving path is real: weights load from safetensors, the tokenizer is a real
byte-level BPE (any UTF-8 text round-trips) and the shapes are ones vLLM's CPU attention supports (head_dim 64; 16 is
refused at the first generate).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]

# A small, fixed corpus: the BPE merges only need to be deterministic, not good.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Triton Inference Server serves models over HTTP and gRPC.",
    "vLLM schedules requests with paged attention and continuous batching.",
    "Hello world! What is the capital of France? Paris is the capital of France.",
    '0 1 2 3 4 5 6 7 8 9 10 100 1000 {"key": "value", "n": 42} [true, false, null]',
    "def main():\n    print('hello')\n    return 0\n",
    "Streaming responses carry only the new text of each step.",
]


# The chat template. A conversation without tools renders as "role: content" lines, then "assistant: " (tests
# depend on that prompt, keep it). With tools it speaks the Hermes format that vLLM's `hermes` tool parser reads: the
# tools as JSON in the system turn, calls as <tool_call>{"name": ..., "arguments": {...}}</tool_call> in the
# assistant's turn, results in <tool_response> tags. The tags are plain text to this tokenizer (byte-level BPE pieces,
# no added tokens): vLLM 0.32's hermes parser and its structural tag work on the decoded text, and new tokens would
# change the vocabulary, hence the random weights and every existing output.
# Message content is only ever printed whole, never iterated, so vLLM sees a "string" content-format template.
_TOOLS_SYSTEM = (
    "{% if tools %}"
    "system: "
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    # Short: at about 1.5 characters a token, this tokenizer spends a third of a 512-token context on two tools.
    "Tools:\n<tools>\n"
    "{% for tool in tools %}{{ (tool.function if tool.function is defined else tool) | tojson }}\n{% endfor %}"
    '</tools>\nTo call one: <tool_call>{"name": <name>, "arguments": <arguments>}</tool_call>\n'
    "{% endif %}"
)
_TOOL_CALLS = (
    "assistant: {{ m['content'] if m['content'] else '' }}"
    "{% for call in m['tool_calls'] %}"
    "{% set f = call.function if call.function is defined else call %}"
    '<tool_call>{"name": {{ f.name | tojson }}, "arguments": '
    # vLLM hands the arguments over parsed (a dict); other callers may pass the OpenAI wire form, a JSON string.
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool_call>"
    # Transformers renders with trim_blocks, which drops a newline right after a block tag: print it instead.
    "{% endfor %}{{ '\\n' }}"
)
CHAT_TEMPLATE = (
    _TOOLS_SYSTEM + "{% for m in messages %}"
    # With tools, a leading system message was merged into the tools' system turn above.
    "{% if tools and loop.first and m['role'] == 'system' %}"
    "{% elif m['role'] == 'assistant' and m.get('tool_calls') %}" + _TOOL_CALLS + "{% elif m['role'] == 'tool' %}"
    "tool: <tool_response>{{ m['content'] }}</tool_response>\n"
    "{% else %}{{ m['role'] }}: {{ m['content'] }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_tokenizer(out: Path, vocab_size: int, max_length: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL_TOKENS[0],
        eos_token=SPECIAL_TOKENS[1],
        pad_token=SPECIAL_TOKENS[2],
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(
    out: Path,
    arch: str,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    max_positions: int,
    seed: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
) -> None:
    import torch
    from transformers import GenerationConfig

    if hidden % heads:
        raise SystemExit(f"hidden size {hidden} is not a multiple of {heads} heads")
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config, cls = LlamaConfig(**common), LlamaForCausalLM
    else:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config, cls = Qwen2Config(**common, use_sliding_window=False), Qwen2ForCausalLM
    torch.manual_seed(seed)
    model = cls(config)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(out)


def build_lora_adapter(model_dir: Path, out: Path, rank: int, seed: int) -> None:
    """A PEFT-format LoRA adapter (q_proj and v_proj of every layer) for the model in ``model_dir``."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((model_dir / "config.json").read_text())
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    head_dim = hidden // config["num_attention_heads"]
    out_dims = {"q_proj": hidden, "v_proj": config["num_key_value_heads"] * head_dim}
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers):
        for module, out_dim in out_dims.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * 0.05
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_dim, rank, generator=generator) * 0.05
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "base_model_name_or_path": str(model_dir),
                "r": rank,
                "lora_alpha": 2 * rank,
                "lora_dropout": 0.0,
                "bias": "none",
                "target_modules": sorted(out_dims),
                "fan_in_fan_out": False,
                "inference_mode": True,
            },
            indent=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory (created; must be empty or absent)")
    parser.add_argument("--arch", choices=("llama", "qwen2"), default="llama")
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4, help="attention heads; head_dim = hidden / heads (64 default)")
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--max-positions", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="write into a non-empty directory")
    parser.add_argument(
        "--lora",
        type=Path,
        metavar="DIR",
        help="also write a random LoRA adapter (rank 8, PEFT format) for the model into DIR",
    )
    args = parser.parse_args(argv)

    head_dim = args.hidden_size // args.heads
    supported = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    if head_dim not in supported:
        print(f"error: head_dim {head_dim} is not supported by vLLM's CPU attention ({supported})", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()) and not args.force:
        print(f"error: {args.out} is not empty; pass --force to write into it", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(args.out, args.vocab_size, args.max_positions)
    # The model's vocabulary matches the tokenizer's, so every token id it can sample decodes.
    vocab = len(tok)
    ids = [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    build_model(
        args.out,
        args.arch,
        vocab,
        args.hidden_size,
        args.layers,
        args.heads,
        args.kv_heads,
        args.max_positions,
        args.seed,
        *ids,
    )
    info = {"path": str(args.out), "arch": args.arch, "vocab_size": vocab, "head_dim": head_dim}
    if args.lora:
        build_lora_adapter(args.out, args.lora, rank=8, seed=args.seed + 1)
        info["lora"] = str(args.lora)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
