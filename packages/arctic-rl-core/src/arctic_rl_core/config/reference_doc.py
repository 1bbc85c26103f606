"""The configuration reference in arctic-rl-core's README, generated from the schema.

arctic-rl config reference                                    # print the Markdown
python -m arctic_rl_core.config.reference_doc --write packages/arctic-rl-core/README.md  # replace it between the markers
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from arctic_rl_core.config.run_config import ArcticRLConfig

START_MARKER = "<!-- config-reference:start -->"
END_MARKER = "<!-- config-reference:end -->"

_INTRO = """\
Generated from the schema (`arctic_rl_core.config.ArcticRLConfig`); regenerate with
`python -m arctic_rl_core.config.reference_doc --write packages/arctic-rl-core/README.md`. A config
file is YAML or TOML with these groups at the top level; every group forbids unknown keys (the
error names the closest valid key). Override any key on the command line with Hydra syntax (`batch.epochs=2`,
`+key=value`, `++key=value`, `~key`). Check a file with `arctic-rl config validate FILE [k=v ...]`
(exit 1, every problem listed with field, value and fix) and see what the Arctic stack receives
with `arctic-rl config show FILE [k=v ...] [--json]`.

How the translation works:

- Defaults of the Arctic backends are the legacy integrations': ZoRRo with memory-lean logits and
  micro-batches of whole prompt groups, Liger kernels, Arctic Inference with FCA (the fields whose
  default is `null`). Each can be turned off (`zorro.enable=false`, `kernels.use_liger=false`,
  `arctic_inference.enable=false`, `arctic_inference.fca=false`, `zorro.logits_optimization=none`); an
  explicit value always wins. On the reference backend they are all off and the plan lists them under
  `no_cpu_meaning`.
- Batch identity, computed: `train_batch_size` (rows per optimizer step) =
  `mini_batch_prompts x rollouts_per_prompt` = `micro_batch_size_per_gpu x gradient_accumulation_steps
  x data_parallel_size`, with `data_parallel_size = training_gpus / ulysses_sequence_parallel_size`;
  a shape that does not divide is an error, never rounded.
- vLLM engine arguments: the typed `vllm.*` knobs, then Arctic Inference injections
  (`forest_cascade_attn_configs="{}"` and `compilation_config.cudagraph_mode=PIECEWISE` with FCA;
  `compilation_config.pass_config.fuse_allreduce_rms=false` with FCA and more than one engine;
  `speculative_config` from `speculative_model` / `suffix_decoding`), then `vllm.engine_args`
  deep-merged on top (user wins per leaf). The plan lists injected keys and those the user overrode.
- `arctic_inference_config` is sent as `{"zorro_inference": {"enable": fca}, "speculative_decoding":
  {"model": ...}}` only when `arctic_inference.enable` is true (the server treats any non-empty
  mapping as "on"); the server's workers then need `ARCTIC_INFERENCE_ENABLED=1`, which 0.1.4 sets
  only when colocated: it is in the plan's `env.workers` (with `backend.worker_env`), set by
  `ArcticBackend.from_config` where the workers inherit it, `env.delivery` says how for the backend.
- DeepSpeed: every precision key is written out (the server would otherwise turn autocast on).
- Loss: `loss.loss_fn=arctic_rl_core` sends `processing.loss_fn =
  arctic_rl_losses.server.policy_loss` (the server imports it by dotted path) with the family
  `loss.policy_loss` and its knobs in `meta.policy_loss_config`; it needs a server that can import
  arctic-rl-core (ray, reference, http with `backend.server_has_arctic_rl_core`), never Cortex.
  The built-in `verl_grpo` (arctic-platform 0.1.4) hard-codes clip ratios 0.2 / 0.2 / 3.0 and sees a
  packed micro-batch as one sequence, so with it the ray/http/cortex backends reject other
  `loss.clip_ratio_*` and the per-sequence modes; the reference backend's `verl_grpo` honours them.
- Cortex: the token is read from the environment variable named by `backend.cortex.token_env`;
  it never appears in the config, the plan or `config show`.
"""


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(arg) for arg in args)
    if origin is tuple:
        return f"[{', '.join(_type_name(arg) for arg in args)}]"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "group"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _default(info: Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return "(group)"
    elif info.default is PydanticUndefined:
        return "(required)"
    else:
        value = info.default
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _group_table(path: str, model: type[BaseModel]) -> list[str]:
    lines = [f"### `{path}`", "", " ".join((model.__doc__ or "").split()), ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        lines.append(
            f"| `{path}.{name}` | {_type_name(info.annotation)} | {_default(info)} | {_cell(info.description or '')} |"
        )
    lines.append("")
    return lines


def _sections(path: str, model: type[BaseModel]) -> list[str]:
    lines = _group_table(path, model)
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            lines += _sections(f"{path}.{name}", annotation)
    return lines


def render_reference() -> str:
    """The Markdown of the configuration reference (deterministic)."""
    lines = [_INTRO]
    for name, info in ArcticRLConfig.model_fields.items():
        annotation = info.annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        lines += _sections(name, annotation)
    return "\n".join(lines).rstrip("\n") + "\n"


def replace_section(text: str, section: str) -> str:
    """`text` with everything between the markers replaced by `section`."""
    start = text.find(START_MARKER)
    end = text.find(END_MARKER)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"the markers {START_MARKER} ... {END_MARKER} are missing or out of order")
    head = text[: start + len(START_MARKER)]
    return f"{head}\n{section}{text[end:]}"


def current_section(text: str) -> str:
    start = text.find(START_MARKER)
    end = text.find(END_MARKER)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"the markers {START_MARKER} ... {END_MARKER} are missing or out of order")
    return text[start + len(START_MARKER) + 1 : end]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print or write the configuration reference.")
    parser.add_argument(
        "--write", metavar="README", help="replace the section between the markers in this file"
    )
    args = parser.parse_args(argv)
    section = render_reference()
    if args.write is None:
        sys.stdout.write(section)
        return 0
    readme = Path(args.write)
    updated = replace_section(readme.read_text(encoding="utf-8"), section)
    readme.write_text(updated, encoding="utf-8")
    print(f"wrote the configuration reference into {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
