"""The order a step's rows are trained in (`adapter_verl.batch_order`).

Stock verl 0.9.1: its own replay buffer hands the trainer a sampled batch in the order the
trajectories reached TransferQueue (generation completion order), so with several mini-batches
per step verl's mini-batches mix prompt groups and vary with timing. The adapter restores the
dataloader order before the update; verl's mini-batch iterator (`actor.shuffle`,
`actor.data_loader_seed`) then cuts the same mini-batches in every run."""

from __future__ import annotations

import inspect
import uuid

import pytest
import torch

pytest.importorskip("verl")

from adapter_verl.batch_order import DataloaderOrder, restore_dataloader_order
from transfer_queue.metadata import KVBatchMeta
from verl.utils import tensordict_utils as tu

ROLLOUT_N = 2


class _TransferQueueListing:
    """The two TransferQueue calls verl's synchronous replay buffer makes while sampling: the listing
    (insertion ordered, as TransferQueue's controller keeps it) and the clear of the sampled prompts."""

    def __init__(self) -> None:
        self.partitions: dict[str, dict[str, dict]] = {"train": {}}

    def put(self, key: str, tag: dict) -> None:
        self.partitions["train"].setdefault(key, {}).update(tag)

    def kv_list(self):
        return {p: dict(items) for p, items in self.partitions.items()}

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.partitions[partition_id].pop(key, None)


def _trajectory_tag(step: int) -> dict:
    return {"status": "success", "seq_len": 8, "global_steps": step, "min_global_steps": 0}


def _completion_order(uids: list[str]) -> list[str]:
    """A step's trajectories as generation finished them: [A1, B0, B1, A0] for prompts [A, B]."""
    a, b = uids
    return [f"{a}_1_0", f"{b}_0_0", f"{b}_1_0", f"{a}_0_0"]


def _stock_sample(monkeypatch, uids: list[str], completed: list[str]) -> KVBatchMeta:
    """verl's own synchronous ReplayBuffer.sample over the prompts `uids` (submitted in that
    order) whose trajectories reached TransferQueue in the order `completed`."""
    from verl.trainer.ppo.v1 import replay_buffer

    listing = _TransferQueueListing()
    monkeypatch.setattr(replay_buffer, "tq", listing)
    for uid in uids:
        listing.put(uid, {"is_prompt": True, "status": "pending", "global_steps": 1})
    for key in completed:
        listing.put(key, _trajectory_tag(1))
    for uid in uids:
        listing.put(uid, {"status": "finished"})
    buffer = replay_buffer.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        poll_interval=0.01,
        train_batch_size=len(uids),
        gen_batch_size=len(uids),
    )
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=len(uids))
    return batch


def test_stock_verl_samples_the_rows_in_completion_order(monkeypatch):
    uids = [str(uuid.uuid4()) for _ in range(2)]
    completed = _completion_order(uids)
    batch = _stock_sample(monkeypatch, uids, completed)
    assert batch.keys == completed  # [A1, B0, B1, A0]: not grouped by prompt


def test_verl_keys_trajectories_by_uid_session_and_output_index():
    # DataloaderOrder reads the prompt, the rollout.n session and the output index back from this key
    from verl.trainer.ppo.v1 import agent_loop_tq

    source = inspect.getsource(agent_loop_tq)
    assert 'keys.append(f"{uid}_{session_id}_{i}")' in source
    assert 'uid, session_id = kwargs["uid"], kwargs["session_id"]' in source


def test_the_adapter_restores_dataloader_order_whatever_the_completion_order(monkeypatch):
    uids = [str(uuid.uuid4()) for _ in range(2)]
    orders = []
    for completed in (_completion_order(uids), list(reversed(_completion_order(uids)))):
        order = DataloaderOrder()
        order.submitted(uids)
        batch = _stock_sample(monkeypatch, uids, completed)
        tags_by_key = dict(zip(batch.keys, batch.tags, strict=True))
        restore_dataloader_order(batch, order)
        assert [tags_by_key[k] for k in batch.keys] == batch.tags  # tags travel with their keys
        orders.append(batch.keys)
        assert len(order) == 0  # the trained prompts are forgotten
    a, b = uids
    assert orders[0] == orders[1] == [f"{a}_0_0", f"{a}_1_0", f"{b}_0_0", f"{b}_1_0"]


def _mini_batches(keys: list[str], *, shuffle: bool, seed: int = 42) -> list[list[str]]:
    """verl's own mini-batch iterator (as the forwarder worker's update_actor calls it) over rows
    in the order `keys`: the rows of each mini-batch, by key."""
    data = tu.get_tensordict({"row": torch.arange(len(keys))})
    iterator = tu.make_iterator(
        data, mini_batch_size=ROLLOUT_N, epochs=1, seed=seed, dataloader_kwargs={"shuffle": shuffle}
    )
    return [[keys[int(i)] for i in mb["row"]] for mb in iterator]


@pytest.mark.parametrize("shuffle", [False, True], ids=["actor.shuffle=false", "actor.shuffle=true"])
def test_verl_cuts_the_same_mini_batches_in_every_run(monkeypatch, shuffle):
    """Two runs whose generations finished in different orders train the same mini-batches: with
    actor.shuffle=false each mini-batch is one prompt group (ppo_mini_batch_size = 1 prompt), with
    shuffle=true verl's seeded shuffle of the dataloader order (data_loader_seed)."""
    uids = [str(uuid.uuid4()) for _ in range(2)]
    a, b = uids
    runs, stock = [], []
    for completed in (_completion_order(uids), [f"{b}_1_0", f"{a}_0_0", f"{a}_1_0", f"{b}_0_0"]):
        batch = _stock_sample(monkeypatch, uids, completed)
        stock.append(_mini_batches(list(batch.keys), shuffle=shuffle))
        order = DataloaderOrder()
        order.submitted(uids)
        restore_dataloader_order(batch, order)
        runs.append(_mini_batches(list(batch.keys), shuffle=shuffle))
    assert runs[0] == runs[1]
    assert stock[0] != stock[1]  # stock verl: what each mini-batch holds depends on timing
    dataloader = [f"{a}_0_0", f"{a}_1_0", f"{b}_0_0", f"{b}_1_0"]
    assert runs[0] == _mini_batches(dataloader, shuffle=shuffle)
    if not shuffle:
        assert runs[0] == [dataloader[:2], dataloader[2:]]
    else:
        assert runs[0] != _mini_batches(dataloader, shuffle=True, seed=43)  # the seed drives it


def test_prompts_from_before_this_process_sort_first_by_step_then_uid():
    order = DataloaderOrder()
    order.submitted(["fresh"])
    keys = ["fresh_0_0", "zold_0_0", "aold_1_0", "aold_0_0", "newer_0_0"]
    tags = [
        _trajectory_tag(5),
        _trajectory_tag(3),
        _trajectory_tag(3),
        _trajectory_tag(3),
        _trajectory_tag(4),
    ]
    batch = KVBatchMeta(partition_id="train", keys=keys, tags=tags)
    restore_dataloader_order(batch, order)
    assert batch.keys == ["aold_0_0", "aold_1_0", "zold_0_0", "newer_0_0", "fresh_0_0"]


def test_a_key_not_in_verls_format_or_a_uid_submitted_twice_is_an_error():
    order = DataloaderOrder()
    with pytest.raises(
        ValueError, match=r"trajectory key 'abc_0' is not verl's `\{uid\}_\{session\}_\{index\}`"
    ):
        order.permutation(["abc_0"], [{}])
    order.submitted(["u"])
    with pytest.raises(ValueError, match="prompt uid 'u' was submitted twice"):
        order.submitted(["u"])
