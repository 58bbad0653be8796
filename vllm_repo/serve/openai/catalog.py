"""Which Triton model answers for an OpenAI ``model`` name.

The names come from the backends themselves: each OpenAI-speaking model's ``/v1/models`` answer (vLLM's
OpenAIServingModels) lists its served name, the Triton model name, and its LoRA adapters, as ``vllm serve`` does. The
gateway keeps the last answers and asks again when a name is not in them (a model loaded since) or when a client lists
the models.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from vllm_repo.serve.openai.triton import TritonOpenAIClient, TritonUnavailable

# A name missed twice within this many seconds is not looked up again: an unknown model must not cost every request
# a round of queries to every model.
REFRESH_MIN_INTERVAL_S = 1.0


class ModelCatalog:
    def __init__(self, triton: TritonOpenAIClient) -> None:
        self.triton = triton
        self.cards: list[dict[str, Any]] = []  # vLLM's model cards, every model's in turn
        self.owner: dict[str, str] = {}  # card id (served name or LoRA adapter) -> Triton model
        self.models: list[str] = []  # Triton models that speak OpenAI, ready at the last refresh
        self._refreshed = 0.0
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:
            models = await self.triton.openai_models()
            answers = await asyncio.gather(*(self._cards_of(m) for m in models))
            cards: list[dict[str, Any]] = []
            owner: dict[str, str] = {}
            for model, model_cards in zip(models, answers, strict=True):
                for card in model_cards:
                    cards.append(card)
                    owner.setdefault(str(card.get("id")), model)
            self.cards, self.owner, self.models = cards, owner, models
            self._refreshed = time.monotonic()

    async def _cards_of(self, model: str) -> list[dict[str, Any]]:
        try:
            chunks = [chunk async for chunk in self.triton.call(model, "/v1/models")]
            listing = json.loads(b"".join(c.body for c in chunks))
        except (TritonUnavailable, ValueError):
            return []  # unloading, or its engine died: not listed, as Triton no longer serves it either
        data = listing.get("data") if isinstance(listing, dict) else None
        return [card for card in data or () if isinstance(card, dict)]

    @property
    def served_names(self) -> list[str]:
        """The models' served names, as vllm serve's "Valid aliases": every card but the LoRA adapters' (theirs
        name the model they adapt as their parent)."""
        return [str(card.get("id")) for card in self.cards if not card.get("parent")]

    async def owner_of(self, name: str | None) -> str | None:
        """The Triton model serving ``name``; with no name, the only model there is (vllm serve's default)."""
        if name is not None and name in self.owner:
            return self.owner[name]
        if time.monotonic() - self._refreshed > REFRESH_MIN_INTERVAL_S:
            await self.refresh()
        if name is None:
            return self.models[0] if len(self.models) == 1 else None
        return self.owner.get(name)
