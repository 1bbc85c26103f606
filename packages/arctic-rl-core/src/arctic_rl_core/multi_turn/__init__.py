"""Multi-turn rollouts through any core `Backend`, framework-neutral.

- `prompt_text`: token ids as the text a text-only server (the Arctic on-prem server) tokenises back,
  and the response text of sampled ids (vLLM's `include_stop_str_in_output=True` semantics).
- `turn_sampler`: sample one turn per prompt from token ids, token in / token out, with the context
  the sampler really conditioned on verified per turn (`SampledTurn`).
- `trajectory_fidelity`: which turns of a trajectory were sampled from exactly the ids it trains on.
"""
