"""How a request gets from execute() to vLLM: its prompt rendered in place (not on vLLM's tokenizer thread pool), and
its task started within the callback that admits it where Python allows."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_repo.backend.vllm_repo_backend import environment


class FakeRenderer:
    """vLLM's renderer as the backend uses it: a synchronous and an asynchronous call, each recording its use."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def render_cmpl(self, prompts: list[Any]) -> list[Any]:
        self.calls.append("now")
        return [{"type": "token", "from": prompt} for prompt in prompts]

    async def render_cmpl_async(self, prompts: list[Any]) -> list[Any]:
        self.calls.append("async")
        await asyncio.sleep(0)  # the real one waits for its thread pool
        return [{"type": "token", "from": prompt} for prompt in prompts]


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    # vLLM's parse_model_prompt, where the release has it; here it only tags the prompt.
    monkeypatch.setattr(environment, "import_first", lambda modules, name: lambda config, prompt: ("parsed", prompt))
    return SimpleNamespace(renderer=FakeRenderer(), model_config=object())


def test_a_text_prompt_is_rendered_without_waiting_for_the_loop(engine: SimpleNamespace) -> None:
    render = environment.prompt_renderer(engine)
    assert render is not None
    coroutine = render({"prompt": "Hello"})
    # The coroutine finishes on its first step: nothing to wait for, so no turn of the loop is spent.
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value == {"type": "token", "from": ("parsed", {"prompt": "Hello"})}
    assert engine.renderer.calls == ["now"]


def test_a_prompt_with_images_keeps_the_asynchronous_renderer(engine: SimpleNamespace) -> None:
    render = environment.prompt_renderer(engine)
    assert render is not None
    prompt = {"prompt": "What is this?", "multi_modal_data": {"image": [object()]}}
    result = asyncio.run(render(prompt))
    assert result["from"] == ("parsed", prompt)
    assert engine.renderer.calls == ["async"]


def test_without_a_synchronous_renderer_the_asynchronous_one_is_used(engine: SimpleNamespace) -> None:
    engine.renderer = SimpleNamespace(render_cmpl_async=FakeRenderer().render_cmpl_async)
    render = environment.prompt_renderer(engine)
    assert render is not None
    assert asyncio.run(render({"prompt": "Hello"}))["type"] == "token"


def test_releases_without_a_renderer_take_raw_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment.prompt_renderer(SimpleNamespace(renderer=None, model_config=object())) is None

    def missing(modules: Any, name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(environment, "import_first", missing)
    assert environment.prompt_renderer(SimpleNamespace(renderer=FakeRenderer(), model_config=object())) is None


def test_a_request_task_runs_up_to_its_first_wait_inside_the_admitting_callback() -> None:
    steps: list[str] = []

    async def request() -> None:
        steps.append("handed to vLLM")
        await asyncio.sleep(0)
        steps.append("output read")

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []

        def admit() -> None:
            task = environment.start_task(loop, request())
            seen.append(f"after start: {steps}")
            tasks.append(task)

        tasks: list[asyncio.Task] = []
        loop.call_soon(admit)
        await asyncio.sleep(0.01)
        await tasks[0]
        return seen

    seen = asyncio.run(main())
    if sys.version_info >= (3, 12):
        assert seen == ["after start: ['handed to vLLM']"]  # started eagerly, within admit()
    else:
        assert seen == ["after start: []"]  # scheduled for the loop's next turn
    assert steps == ["handed to vLLM", "output read"]
