"""The rules: every check is a small function registered (registry.py) with a stable code; all_rules() lists them.

A rule looks at one model directory (scope "model") or at a whole repository (scope "repository") and yields
Findings; the runner stamps each with the rule's code and turns it into a Diagnostic. Codes never change meaning,
and each family has its module: VR1xx layout (vr1_layout), VR2xx config.pbtxt (vr2_config_pbtxt), VR3xx model.json
(vr3_model_json), VR4xx the model's Hugging Face config (vr4_hf_config), VR5xx across files and models (one module
per subject: vr5_lora, vr5_placement for the GPUs, vr5_serving), VR6xx memory fit (vr6_memory_fit), VR7xx
openai.json (vr7_openai_json).

A rule's docstring is its documentation: the first line is the summary `vllm-repo rules` lists (and the table in
docs/rules.md), the rest what `vllm-repo rules CODE` explains, ending with an example that triggers it.
"""

from __future__ import annotations

from vllm_repo.validate.rules.registry import RULES, CheckContext, Finding, Rule, rule

__all__ = ["RULES", "CheckContext", "Finding", "Rule", "all_rules", "rule"]


def all_rules() -> list[Rule]:
    # Importing the modules registers their rules; done once, here, so the file list is the rule list.
    from vllm_repo.validate.rules import (  # noqa: F401
        vr1_layout,
        vr2_config_pbtxt,
        vr3_model_json,
        vr4_hf_config,
        vr5_lora,
        vr5_placement,
        vr5_serving,
        vr6_memory_fit,
        vr7_openai_json,
    )

    return [RULES[code] for code in sorted(RULES)]
