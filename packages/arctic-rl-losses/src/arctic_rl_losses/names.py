"""Names of the server-side losses (no torch: the config schema and validation import this).

`SERVER_LOSS_FN` is the dotted path an Arctic server (arctic-platform 0.1.4) imports inside its
DeepSpeed worker when `processing.loss_fn` is not one of its registered names; `IMPORT_PROBE_FN`
is the side-effect-free loss the HTTP backend sends once at startup in a no-grad forward to check
that the server can import the package.
"""

from __future__ import annotations

SERVER_LOSS_FN = "arctic_rl_losses.server.policy_loss"
IMPORT_PROBE_FN = "arctic_rl_losses.server.import_probe"

# The loss families `arctic_rl_losses` computes (`loss.policy_loss` / meta.policy_loss_config.loss_mode).
POLICY_LOSSES: tuple[str, ...] = (
    "ppo_clip",  # PPO clip without dual clip: SkyRL `regular`
    "dual_clip",  # PPO clip + dual clip for A < 0: SkyRL `dual_clip`, verl `vanilla`, the built-in verl_grpo
    "gspo",  # sequence-level importance ratio (GSPO-token): SkyRL and verl `gspo`
    "sapo",  # soft gate instead of a clip: SkyRL and verl `sapo`
    "cispo",  # clipped, stop-gradient IS weight times log-prob: SkyRL and verl `cispo`
    "clip_cov",  # PPO clip + covariance-selected gradient masking: SkyRL and verl `clip_cov`
    "kl_cov",  # unclipped ratio + |log-ratio| penalty on covariance-selected tokens: `kl_cov`
    "gpg",  # plain policy gradient -A log p: verl `gpg`
    # stop-gradient IS weight, zeroed outside (1 - low, 1 + high), times log-prob: SkyRL `rollout_is`
    # (the behaviour policy is the rollout: the adapter sends the rollout log-probs as old log-probs)
    "rollout_is",
)

# Every `loss_agg_mode` of verl 0.9.1's `agg_loss` (the built-in verl_grpo lacks token-sum).
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
BUILTIN_LOSS_AGG_MODES: tuple[str, ...] = tuple(m for m in LOSS_AGG_MODES if m != "token-sum")

_KL_BASE: tuple[str, ...] = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")
KL_LOSS_TYPES: tuple[str, ...] = _KL_BASE + tuple(f"{name}+" for name in _KL_BASE)
