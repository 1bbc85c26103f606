"""`BorrowedBackend`: a backend reached through a handle. Every call goes to the owner's backend;
`shutdown()` only detaches, because a handle never destroys what it did not create."""

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


class BorrowedBackend(Backend):
    def __init__(self, owner: Backend) -> None:
        self._owner: Backend | None = owner

    @property
    def owner(self) -> Backend:
        if self._owner is None:
            raise RuntimeError("this borrowed backend was detached by shutdown(): connect the handle again")
        return self._owner

    async def generate(
        self, prompts: Sequence[str] | Sequence[Sequence[int]], params: SamplingParams
    ) -> GenerateOutput:
        return await self.owner.generate(prompts, params)

    async def forward(self, payload: WirePayload, *, reference_model: bool = False) -> ForwardOutput:
        return await self.owner.forward(payload, reference_model=reference_model)

    async def forward_backward(self, payload: WirePayload) -> TrainOutput:
        return await self.owner.forward_backward(payload)

    async def step(self, learning_rate: float | None = None) -> StepOutput:
        return await self.owner.step(learning_rate)

    async def sync_weights(self, *, cuda_ipc: bool | None = None, low_memory: bool | None = None) -> int:
        return await self.owner.sync_weights(cuda_ipc=cuda_ipc, low_memory=low_memory)

    async def sleep_inference(self, level: int = 1) -> None:
        await self.owner.sleep_inference(level)

    async def wake_inference(self, tags: Sequence[str] | None = None) -> None:
        await self.owner.wake_inference(tags)

    async def sleep_training(self, mode: str = "all") -> None:
        await self.owner.sleep_training(mode)

    async def wake_training(self) -> None:
        await self.owner.wake_training()

    async def reset_prefix_cache(self) -> None:
        await self.owner.reset_prefix_cache()

    async def state(self) -> BackendState:
        return await self.owner.state()

    async def save_checkpoint(self, path: str, step: int) -> str:
        return await self.owner.save_checkpoint(path, step)

    async def load_checkpoint(self, path: str, step: int) -> None:
        await self.owner.load_checkpoint(path, step)

    def handle(self) -> BackendHandle:
        return self.owner.handle()

    async def shutdown(self) -> None:
        self._owner = None
