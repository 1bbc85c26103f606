"""verl's Hugging Face config overrides (`actor_rollout_ref.model.override_config.*`) on the Arctic path
(adapter_verl.model_overrides): the Arctic jobs load a model folder made at start-up whose config.json is
what verl's own `HFModelConfig` builds for the same overrides, every other file linked; the training
job and the sampler of `arctic-rl serve --reference` load it through `ArcticBackend` and the real 0.1.4
client; what verl would set silently (an unknown key, another type) or fail on, and a server that cannot
read the folder, are refused at the dry run naming the key. No Ray."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from verl_e2e_run import TINY_MODEL, run_overrides
from wire_server import tiny_model_dir

F = "actor_rollout_ref.model.override_config"
BASE_MAX_POSITIONS = 4096  # the tiny model's max_position_embeddings (ReferenceModelConfig's default)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("override_model") / "model", 42, **TINY_MODEL)


def argv(root: Path, base: Path, *extra: str) -> list[str]:
    """A verl run's settings with the tiny model (and the given overrides), backend on the local Ray
    cluster unless `extra` says otherwise."""
    return [
        *run_overrides(root, train_batch=2, rollout_n=2, max_response=8, steps=1),
        f"actor_rollout_ref.model.path={base}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        f"trainer.default_local_dir={root / 'ckpt'}",
        *extra,
    ]


def check(*args: str):
    from adapter_verl.main import check as dry_run_check

    return dry_run_check(list(args))


def _verl_hf_config(base: Path, override_config: dict):
    """The HF config verl 0.9.1's own actor builds (`HFModelConfig.__post_init__`)."""
    from verl.workers.config.model import HFModelConfig

    return HFModelConfig(path=str(base), override_config=override_config).hf_config


# bos / eos / pad ids: verl's HFModelConfig sets them from the tokenizer whatever override_config says
# (not an override); the attention implementation: verl passes it to AutoConfig (kernels.attn_implementation);
# the folder each was loaded from
_NOT_OVERRIDES = {
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "_attn_implementation_internal",
    "_name_or_path",
}


def _comparable(config) -> dict:
    return {k: v for k, v in config.to_dict().items() if k not in _NOT_OVERRIDES}


@pytest.mark.parametrize(
    "override_config",
    [
        {"max_position_embeddings": 8192, "attention_dropout": 0.25, "use_cache": False},
        # verl's Megatron spelling, which its FSDP HFModelConfig also reads (only model_config's keys apply)
        {"model_config": {"max_position_embeddings": 10240}, "attn_implementation": "sdpa"},
    ],
    ids=["flat", "model_config"],
)
def test_the_derived_config_is_the_one_verl_builds_and_every_other_file_is_linked(
    base, tmp_path, override_config
):
    from adapter_verl.model_overrides import DerivedModel, config_overrides
    from transformers import AutoConfig

    folder = DerivedModel(str(base), config_overrides(override_config), str(tmp_path / "arctic_model")).make()
    derived = AutoConfig.from_pretrained(str(folder))
    verl = _verl_hf_config(base, override_config)
    assert _comparable(derived) == _comparable(verl)
    wanted = override_config.get("model_config", override_config)
    for key, value in wanted.items():
        if key != "attn_implementation":
            assert getattr(derived, key) == value
    assert derived.max_position_embeddings != BASE_MAX_POSITIONS  # the override is not the base's value
    assert (
        AutoConfig.from_pretrained(str(base)).max_position_embeddings == BASE_MAX_POSITIONS
    )  # base untouched
    entries = sorted(p.name for p in base.iterdir() if p.name != "config.json")
    linked = sorted(p.name for p in folder.iterdir() if p.is_symlink())
    assert linked == entries
    for name in entries:  # links, never copies
        assert os.path.realpath(folder / name) == str((base / name).resolve())
    assert not (folder / "config.json").is_symlink()


def test_the_folder_is_made_again_from_the_current_settings_and_never_over_a_foreign_folder(base, tmp_path):
    from adapter_verl.model_overrides import DerivedModel

    folder = tmp_path / "arctic_model"
    DerivedModel(str(base), {"max_position_embeddings": 8192}, str(folder)).make()
    DerivedModel(str(base), {"max_position_embeddings": 6144}, str(folder)).make()
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 6144
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="not made by adapter_verl"):
        DerivedModel(str(base), {"max_position_embeddings": 8192}, str(foreign)).make()
    assert (foreign / "notes.txt").read_text() == "keep"


def test_what_verl_does_with_the_refused_overrides(base):
    """The reasons of the refusals: verl adds an unknown key silently (no code of the model reads it),
    fails in its workers on another type (transformers' typed config fields) and on a mapping for a key
    that is no sub-config (rope_parameters is a plain dict)."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig
    from verl.utils.model import update_model_config

    config = AutoConfig.from_pretrained(str(base))
    update_model_config(config, {"embd_pdrop": 0.0})
    assert config.embd_pdrop == 0.0 and "embd_pdrop" not in type(config).__dataclass_fields__
    with pytest.raises(StrictDataclassError, match="expected int, got float"):
        update_model_config(config, {"max_position_embeddings": 8192.5})
    with pytest.raises(AttributeError):
        update_model_config(config, {"rope_parameters": {"rope_type": "linear"}})


def test_the_dry_run_names_the_folder_and_gives_it_to_every_arctic_job(base, tmp_path):
    result = check(*argv(tmp_path, base, f"+{F}.max_position_embeddings=8192", f"+{F}.attention_dropout=0."))
    assert result.problems == []
    folder = str(tmp_path / "ckpt" / "arctic_model")
    assert result.resolution.config.model.name == folder
    notice = next(n for n in result.notices if n.startswith(F))
    assert folder in notice and "attention_dropout, max_position_embeddings" in notice
    assert not Path(folder).exists()  # made at start-up, not by a dry run


def test_a_key_the_config_does_not_have_is_set_as_verl_sets_it_and_named(base, tmp_path):
    """verl-recipe's DAPO launchers set GPT-2's dropout names on Qwen models: stock verl adds them (no code
    reads them) and runs; so does the Arctic path, saying so."""
    from adapter_verl.model_overrides import DerivedModel, config_overrides
    from transformers import AutoConfig

    overrides = [f"+{F}.attention_dropout=0.", f"+{F}.embd_pdrop=0.", f"+{F}.resid_pdrop=0."]
    result = check(*argv(tmp_path, base, *overrides))
    assert result.problems == []
    assert (
        f"{F}.embd_pdrop, {F}.resid_pdrop: not keys of the model's config: set as verl sets them"
        in " ".join(result.notices)
    )
    wanted = {"attention_dropout": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0}
    folder = DerivedModel(str(base), config_overrides(wanted), str(tmp_path / "arctic_model")).make()
    written = json.loads((folder / "config.json").read_text())
    assert {k: written[k] for k in wanted} == wanted
    derived = AutoConfig.from_pretrained(str(folder))
    assert _comparable(derived) == _comparable(_verl_hf_config(base, wanted))


def test_attn_implementation_alone_makes_no_folder(base, tmp_path):
    result = check(*argv(tmp_path, base, f"+{F}.attn_implementation=sdpa"))
    assert result.problems == []
    assert result.resolution.config.model.name == str(base)
    assert result.resolution.config.kernels.attn_implementation == "sdpa"


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (
            [f"+{F}.max_position_embedding=8192"],
            f"{F}.max_position_embedding",
            "Qwen3Config (the model's config.json) has no max_position_embedding: verl would add it as a new "
            "attribute that no code of the model reads, and leave max_position_embeddings as it is. Fix: did you "
            f"mean {F}.max_position_embeddings?",
        ),
        ([f"+{F}.max_position_embeddings=8192.5"], f"{F}.max_position_embeddings", "is int (4096"),
        ([f"+{F}.tie_word_embeddings=1"], f"{F}.tie_word_embeddings", "is bool"),
        ([f"+{F}.rope_parameters.rope_type=linear"], f"{F}.rope_parameters", "is not a sub-config"),
        (
            [f"+{F}.model_config.max_position_embeddings=8192", f"+{F}.attention_dropout=0."],
            f"{F}.attention_dropout",
            "applies only model_config's keys",
        ),
    ],
    ids=["misspelt", "float_for_int", "int_for_bool", "plain_mapping", "beside_model_config"],
)
def test_overrides_verl_would_apply_wrongly_are_refused_naming_the_key(
    base, tmp_path, overrides, field, words
):
    result = check(*argv(tmp_path, base, *overrides))
    refused = [p for p in result.problems if p.startswith(f"{field} = ")]
    assert len(refused) == 1, result.problems
    assert words in refused[0] and "Fix: " in refused[0]
    assert len(result.problems) == 1, result.problems


@pytest.mark.parametrize(
    ("backend", "where"),
    [
        (
            ["backend.kind=http", "backend.host=trainer-17.example.com"],
            "the HTTP server at trainer-17.example.com",
        ),
        (
            [
                "backend.kind=cortex",
                "backend.cortex.account=a",
                "backend.cortex.host=h.example.com",
                "backend.cortex.database=d",
                "backend.cortex.schema_name=s",
                "backend.cortex.warehouse=w",
            ],
            "Cortex",
        ),
    ],
    ids=["remote_http", "cortex"],
)
def test_a_server_that_cannot_read_the_folder_is_refused_with_the_fix(base, tmp_path, backend, where):
    core = [f"++remote_backend.core.{item}" for item in backend]
    result = check(*argv(tmp_path, base, f"+{F}.max_position_embeddings=8192", *core))
    refused = [p for p in result.problems if p.startswith(F)]
    assert len(refused) == 1, result.problems
    assert f"which {where} cannot read" in refused[0]
    assert "set actor_rollout_ref.model.path to it and remove the overrides" in refused[0]


def test_a_model_not_on_this_machine_is_checked_at_start_up(tmp_path):
    missing = tmp_path / "models" / "Qwen2.5-Math-7B"
    result = check(*argv(tmp_path, missing, f"+{F}.max_position_embeddings=32768"))
    assert not [p for p in result.problems if p.startswith(F)]
    assert any(
        "is not on this machine" in n and "checked against its config.json at start-up" in n
        for n in result.notices
    )
    from adapter_verl.model_overrides import DerivedModel

    with pytest.raises(FileNotFoundError, match="huggingface-cli download"):
        DerivedModel(str(missing), {"max_position_embeddings": 32768}, str(tmp_path / "arctic_model")).make()


def test_a_hub_id_resolves_to_its_local_snapshot(base, tmp_path, monkeypatch):
    """A hub id as model path: the snapshot in the local Hugging Face cache (nothing downloaded)."""
    from adapter_verl.model_overrides import DerivedModel, local_model_folder

    cache = tmp_path / "hub"
    snapshot = cache / "models--acme--tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for entry in base.iterdir():
        (snapshot / entry.name).symlink_to(entry)
    (cache / "models--acme--tiny" / "refs").mkdir()
    (cache / "models--acme--tiny" / "refs" / "main").write_text("0" * 40)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))  # read at call time
    assert local_model_folder("acme/tiny") == snapshot
    assert local_model_folder("acme/absent") is None
    folder = DerivedModel(
        "acme/tiny", {"max_position_embeddings": 8192}, str(tmp_path / "arctic_model")
    ).make()
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 8192


def test_the_training_job_and_the_sampler_load_the_overridden_config(wire, base, tmp_path):
    """The translation end to end without Ray: verl's settings -> the adapter's settings (the folder
    named as model.name) -> the folder made -> `ArcticBackend` over the real client to the reference
    server. The server's jobs share one engine, which refuses jobs naming different models, and its
    sampler refuses a max_model_len above the loaded config's max_position_embeddings: a sampling job
    with max_model_len 8192 runs only because both jobs loaded the overridden folder (the base folder
    is refused the same settings)."""
    from adapter_verl.config import settings_from_verl
    from adapter_verl.model_overrides import DerivedModel
    from arctic_rl_core import dispatch
    from arctic_rl_core.backends.arctic import ArcticBackend
    from arctic_rl_core.backends.protocol import SamplingParams

    core = [f"++remote_backend.core.{s}" for s in wire.overrides(model=False)]
    result = check(
        *argv(
            tmp_path,
            base,
            f"+{F}.max_position_embeddings=8192",
            "actor_rollout_ref.rollout.max_model_len=8192",
            *core,
        )
    )
    assert result.problems == []
    settings = settings_from_verl(result.config, 1)
    folder = DerivedModel(**settings.derived_model).make()
    cfg = settings.arctic_config()
    assert cfg.model.name == str(folder) and cfg.vllm.max_model_len == 8192
    mark = wire.request_count()
    backend = ArcticBackend.from_config(cfg)
    try:
        out = dispatch.run(backend.generate(["count the schools"], SamplingParams(max_tokens=4)))
        assert len(out.completions[0].token_ids) >= 1
    finally:
        dispatch.run(backend.shutdown())
    created = [r for r in wire.requests(mark) if r["route"] == "/initialize"]
    assert sorted(r["job_type"] for r in created) == ["sampling", "training"]
    assert all(r["status"] == 200 for r in created)

    with pytest.raises(Exception, match="max_position_embeddings=4096"):
        ArcticBackend.from_config(
            cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(base)})})
        )
    wire.destroy_all_jobs()
