"""Arctic RL for stock verl 0.9.1 (no fork): verl's types <-> arctic_rl_core. verl is imported lazily."""
