"""The order of a sampled batch's rows, restored from completion order to the dataloader's.

verl 0.9.1's V1 trainer (both the sync and the separate-async trainer) submits each batch of prompts
in dataloader order (`PPOTrainer._submit_batch_to_rollout`, every prompt under a fresh uuid4 `uid`);
its agent-loop workers put each trajectory into TransferQueue when its session finishes (key
`{uid}_{session}_{output index}`, `AgentLoopWorkerTQ._agent_loop_postprocess`); the replay buffer then
materialises the sampled groups in TransferQueue's listing order, which is insertion order
(`ReplayBuffer._materialize_batch`): the rows reach the old-log-prob forward, the advantages and the
actor update in the order their generations COMPLETED. With several mini-batches per step verl's
mini-batches then mix prompt groups, and what each holds changes from run to run with timing. That is
stock verl (no Arctic code is on that path); `tests/verl/test_verl_batch_order.py` pins it on verl's
own replay buffer.

`DataloaderOrder` records the position of every submitted prompt and sorts a sampled batch by
(dataloader position of its prompt, session, output index): the rows of one prompt together, its
`rollout.n` samples in session order, the prompts in the order verl's dataloader produced them (so
`data.shuffle` / `data.seed` keep driving it). verl's own mini-batch iterator then cuts that order
(`actor.shuffle` with `actor.data_loader_seed` shuffles it, seeded, as stock verl does), so a run's
mini-batches are the same in every run. Prompts submitted before this process started (verl's resume
re-issues in-flight ones) have no recorded position: they sort first (they are older), by the step
they were submitted at and their uid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# verl's trajectory key: `{uid}_{session_id}_{index}` (uid is a uuid4: it has no underscore)
_KEY_PARTS = 3


class DataloaderOrder:
    """The dataloader position of every prompt submitted for rollout and not yet trained."""

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._positions)

    def submitted(self, uids: Iterable[str]) -> None:
        """Prompts handed to rollout, in dataloader order."""
        for uid in uids:
            uid = str(uid)
            if uid in self._positions:
                raise ValueError(
                    f"prompt uid {uid!r} was submitted twice: verl gives every prompt a fresh uid"
                )
            self._positions[uid] = self._next
            self._next += 1

    def permutation(self, keys: Sequence[str], tags: Sequence[dict[str, Any]]) -> list[int]:
        """The indices of `keys` (verl trajectory keys, with their replay-buffer tags) in dataloader
        order: by prompt position, then session, then output index."""

        def sort_key(i: int) -> tuple:
            uid, session, index = _split(keys[i])
            position = self._positions.get(uid)
            if position is None:  # submitted before this process (a resumed run's re-issued prompt)
                return (0, int(tags[i].get("global_steps", 0)), uid, session, index)
            return (1, position, "", session, index)

        return sorted(range(len(keys)), key=sort_key)

    def trained(self, keys: Iterable[str]) -> None:
        """The prompts of these rows left the replay buffer: forget their positions."""
        for key in keys:
            self._positions.pop(_split(key)[0], None)


def _split(key: str) -> tuple[str, int, int]:
    parts = str(key).rsplit("_", 2)
    if len(parts) != _KEY_PARTS or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError(
            f"trajectory key {key!r} is not verl's `{{uid}}_{{session}}_{{index}}`: the batch order cannot "
            "be restored (a verl release changed AgentLoopWorkerTQ's key format?)"
        )
    return parts[0], int(parts[1]), int(parts[2])


def restore_dataloader_order(batch: Any, order: DataloaderOrder) -> list[int]:
    """Reorder the sampled `batch` (TransferQueue's KVBatchMeta, in place) into dataloader order;
    returns the permutation applied (new position -> old position)."""
    indexes = order.permutation(batch.keys, batch.tags)
    if indexes != list(range(len(indexes))):
        batch.reorder(indexes)
    order.trained(batch.keys)
    return indexes
