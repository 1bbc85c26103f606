"""Reward environments shared by every framework: BIRD text-to-SQL (`envs.bird`) and GSM8K
(`envs.gsm8k`). Importing this package imports nothing heavy."""
