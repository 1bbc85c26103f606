"""`arctic_rl_core.checkpoint_folder`: both adapters keep a run's backend checkpoints in one folder
beside the framework's `global_step_<n>` folders, so that the server's save_total_limit is
"checkpoints kept"."""

from __future__ import annotations

import pytest
from arctic_rl_core.checkpoint_folder import backend_checkpoint_dir, backend_checkpoint_root, step_of


@pytest.mark.parametrize(
    ("framework_path", "root", "step"),
    [
        ("/runs/a/global_step_3/actor", "/runs/a/arctic_backend", 3),  # verl
        ("/runs/a/global_step_12/policy", "/runs/a/arctic_backend", 12),  # SkyRL
        ("/runs/a/global_step_7", "/runs/a/arctic_backend", 7),
        ("/runs/global_step_1x/b/global_step_5/policy/", "/runs/global_step_1x/b/arctic_backend", 5),
    ],
)
def test_backend_folder_is_beside_the_frameworks_step_folders(framework_path, root, step):
    assert backend_checkpoint_root(framework_path) == root
    assert step_of(framework_path) == step
    assert backend_checkpoint_dir(framework_path, step) == f"{root}/checkpoint-{step}"


def test_a_path_without_a_step_names_the_layout():
    with pytest.raises(ValueError, match=r"'/runs/a/policy' has no global_step_<n>"):
        backend_checkpoint_root("/runs/a/policy")
