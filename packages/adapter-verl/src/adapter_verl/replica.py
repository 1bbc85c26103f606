"""The `arctic` rollout replica (`actor_rollout_ref.rollout.name=arctic`): one server actor per replica,
`adapter_verl.rollout_server.ArcticRolloutServer` (verl's token-in/token-out `generate` over the core
backend; in its own module, which imports no verl, so the actor's process does not)."""

from __future__ import annotations

import ray
from verl.workers.rollout.replica import RolloutMode, RolloutReplica

from adapter_verl.rollout_server import ArcticRolloutServer
from adapter_verl.verl_internals import set_replica_server


class ArcticRolloutReplica(RolloutReplica):
    """One server actor per replica, on no CPU of its own (it only awaits the backend)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def init_standalone(self) -> None:
        """verl's standalone replica (separate async) without its GPU pool and rollout workers: the
        sampling job's GPUs belong to the Arctic backend, and the server actor forwards to it. No worker
        means nothing for a collective checkpoint engine to reach; the adapter's async trainer syncs
        through the forwarder's `update_weights` (the naive engine)."""

        self.rollout_mode = RolloutMode.STANDALONE
        self.workers = []
        await self.launch_servers()

    async def launch_servers(self) -> None:
        name = f"arctic_rollout_server_{self.replica_rank}{self.name_suffix}"
        server_cls = ray.remote(num_cpus=0)(ArcticRolloutServer)
        server = server_cls.options(name=name, max_concurrency=self.max_concurrency).remote(
            replica_rank=self.replica_rank,
            response_length=int(self.config.response_length),
            max_num_seqs=int(self.config.max_num_seqs),
            prompt_length=int(self.config.prompt_length),
            max_model_len=None if self.config.max_model_len is None else int(self.config.max_model_len),
        )
        self.servers = [server]
        set_replica_server(self, server, f"arctic-replica-{self.replica_rank}{self.name_suffix}")
