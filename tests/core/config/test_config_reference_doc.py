"""The configuration reference in arctic-rl-core's README is generated from the schema and must be current."""

from __future__ import annotations

from pathlib import Path

import pytest
from arctic_rl_core.config import ArcticRLConfig
from arctic_rl_core.config.errors import all_leaf_paths, schema_paths
from arctic_rl_core.config.reference_doc import (
    END_MARKER,
    START_MARKER,
    current_section,
    main,
    render_reference,
    replace_section,
)

README = Path(__file__).resolve().parents[3] / "packages" / "arctic-rl-core" / "README.md"
REGENERATE = "python -m arctic_rl_core.config.reference_doc --write packages/arctic-rl-core/README.md"


def test_readme_section_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert START_MARKER in text and END_MARKER in text, f"{README} lacks the config-reference markers"
    assert current_section(text) == render_reference(), f"README config reference is stale: run {REGENERATE}"


def test_reference_lists_every_field_and_group() -> None:
    doc = render_reference()
    for path in all_leaf_paths(ArcticRLConfig):
        if path in schema_paths(ArcticRLConfig):
            assert f"### `{path}`" in doc, path
        else:
            assert f"| `{path}` |" in doc, path
    assert "| `loss.kl_loss_type` | " in doc and '"low_var_kl+"' in doc
    assert render_reference() == doc  # deterministic


def test_write_replaces_only_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{START_MARKER}\nold text\n{END_MARKER}\nafter\n")
    assert main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"# Title\n\nbefore\n{START_MARKER}\n")
    assert text.endswith(f"{END_MARKER}\nafter\n")
    assert current_section(text) == render_reference()
    assert "old text" not in text
    # idempotent
    assert replace_section(text, render_reference()) == text


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_section("# no markers\n", "x")
