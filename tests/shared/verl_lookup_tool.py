"""A verl function tool (`multi_turn.function_tool_path`, verl.tools.function_tool) for the tool-agent
tests: `lookup(key)` answers `<key> = 42`, and raises for the key "boom" (a tool whose service is down)."""

from __future__ import annotations

from verl.tools.function_tool import function_tool


@function_tool
def lookup(key: str) -> str:
    """Look up a fact by its key.

    Args:
        key: The key of the fact.
    """
    if key == "boom":
        raise RuntimeError("the lookup service is down")
    return f"{key} = 42"
