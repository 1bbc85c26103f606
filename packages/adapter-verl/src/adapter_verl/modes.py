"""The names the adapter registers with verl and selects: its trainer modes and its rollout.

`arctic` is verl's synchronous V1 trainer with the Arctic forwarders; `arctic_separate_async` is what
`adapter_verl.main` makes of verl's `trainer.v1.trainer_mode=separate_async` (verl's separate-async
trainer with the Arctic forwarders and rollout replicas); `arctic` is also the rollout name.
"""

TRAINER_MODE = "arctic"
ASYNC_TRAINER_MODE = "arctic_separate_async"
ROLLOUT_NAME = "arctic"
# verl's own trainer modes
VERL_SYNC = "sync"
VERL_SEPARATE_ASYNC = "separate_async"
