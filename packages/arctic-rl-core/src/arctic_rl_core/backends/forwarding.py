"""`ForwardingBackend`: a `Backend` that sends every call to another one (`target`). Wrappers
(a borrowed handle's view, the parity recorder) subclass it and override only what they change."""

from __future__ import annotations

from collections.abc import Sequence

from arctic_rl_core.backends.protocol import (
    Backend,
    BackendHandle,
    BackendState,
    ForwardOutput,
    GenerateOutput,
    SamplingParams,
    StepOutput,
    TrainOutput,
    WirePayload,
)


class ForwardingBackend(Backend):
    """Delegates the whole protocol to `self.target` (a property subclasses may guard)."""

    def __init__(self, target: Backend) -> None:
        self._target: Backend | None = target

    @property
    def target(self) -> Backend:
        if self._target is None:
            raise RuntimeError(f"this {type(self).__name__} has no backend to forward to (it was shut down)")
        return self._target

    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        return await self.target.generate(prompts, params)

    @property
    def accepts_token_ids(self) -> bool:
        return self.target.accepts_token_ids

    @property
    def max_generate_calls_in_flight(self) -> int | None:
        return self.target.max_generate_calls_in_flight

    @property
    def serves_forward(self) -> bool:
        return self.target.serves_forward

    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        return await self.target.forward(payload, reference_model=reference_model)

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        return await self.target.forward_backward(payload)

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        return await self.target.step(learning_rate)

    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        return await self.target.sync_weights(cuda_ipc=cuda_ipc, low_memory=low_memory)

    async def sleep_inference(self, level: int = 1) -> None:
        await self.target.sleep_inference(level)

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        await self.target.wake_inference(tags)

    async def sleep_training(self, mode: str = "all") -> None:
        await self.target.sleep_training(mode)

    async def wake_training(self) -> None:
        await self.target.wake_training()

    async def reset_prefix_cache(self) -> None:
        await self.target.reset_prefix_cache()

    async def state(self) -> BackendState:
        return await self.target.state()

    async def save_checkpoint(
        self, path: str, step: int, *, export_hf: bool = False, save_total_limit: int | None = None
    ) -> str:
        return await self.target.save_checkpoint(
            path, step, export_hf=export_hf, save_total_limit=save_total_limit
        )

    async def load_checkpoint(self, path: str, step: int) -> None:
        await self.target.load_checkpoint(path, step)

    def handle(self) -> BackendHandle:
        return self.target.handle()

    async def shutdown(self) -> None:
        await self.target.shutdown()
