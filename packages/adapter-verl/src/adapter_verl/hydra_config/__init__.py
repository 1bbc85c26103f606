"""Hydra config groups shipped with the adapter (found through `pkg://adapter_verl.hydra_config`)."""
