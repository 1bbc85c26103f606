"""The bundled BIRD sample as multi-turn rows (core preprocessing, compact schema): what
`arctic-rl bird preprocess --max-turns N` writes, for the SkyRL and verl multi-turn tests."""

from __future__ import annotations

from typing import Any


def bird_multi_turn_rows(max_turns: int, split: str = "train") -> list[dict[str, Any]]:
    """The Arctic `bird_multi_turn` rows of the bundled BIRD sample (core preprocessing, compact schema)."""
    from arctic_rl_core.envs.bird.dataset import load_split
    from arctic_rl_core.envs.bird.preprocess import PreprocessOptions, build_rows
    from arctic_rl_core.envs.bird.sample import sample_dir
    from arctic_rl_core.envs.bird.schema_prompt import SchemaPromptCache, SchemaPromptOptions

    compact = SchemaPromptOptions(
        sample_rows=0, example_values=0, include_descriptions=False, include_foreign_keys=False
    )
    options = PreprocessOptions(schema_prompt=compact, max_turns=max_turns)
    rows, _ = build_rows(load_split(sample_dir(), split), SchemaPromptCache(compact), options)
    return rows
