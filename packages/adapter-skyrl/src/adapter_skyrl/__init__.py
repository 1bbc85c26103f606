"""Arctic RL for stock SkyRL 0.4.0: SkyRL's types <-> arctic_rl_core. SkyRL is imported lazily."""
