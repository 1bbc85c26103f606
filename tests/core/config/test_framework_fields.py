"""The declarative framework-field table (`arctic_rl_core.config.framework_fields`), the legacy-key
aliases and the startup settings table, over a small dataclass "framework" of our own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from arctic_rl_core.config import ArcticRLConfig, ConfigError
from arctic_rl_core.config.framework_fields import (
    UNSET,
    FieldProblem,
    Fields,
    FieldTable,
    Found,
    NotAppliedSetting,
    Notice,
    Rule,
    derived,
    mapped,
    marked_section,
    not_applicable,
    passed_through,
    rejected,
    replace_marked_section,
)
from arctic_rl_core.config.legacy_keys import Alias, LegacyKeys, Replaced
from arctic_rl_core.config.settings_table import render_settings_table, settings_rows


@dataclass
class Placement:
    gpus_per_node: int = 1
    nodes: int = 1


@dataclass
class Critic:
    path: str | None = None
    lr: float = 1e-5


@dataclass
class Trainer:
    placement: Placement = field(default_factory=Placement)
    critic: Critic = field(default_factory=Critic)
    lr: float = 1e-6
    micro: int = 1
    lora_rank: int = 0
    logger: str = "console"
    loss: str = "regular"


def leaves(obj, prefix=""):
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from leaves(value, path + ".")
        else:
            yield path


def reader(obj):
    def read(path):
        node = obj
        for part in path.split("."):
            node = getattr(node, part)
        return node

    return read


def _loss(value):
    if value not in ("regular", "dual_clip"):
        raise FieldProblem(f"no Arctic loss computes {value!r}", "set loss=regular")
    return "verl_grpo"


TABLE = FieldTable(
    "Toy 1.0",
    [
        derived(
            "placement.training_gpus",
            ("placement.gpus_per_node", "placement.nodes"),
            lambda r: r("placement.gpus_per_node") * r("placement.nodes"),
            "gpus_per_node x nodes",
        ),
        mapped("lr", "optimizer.lr"),
        mapped("micro", "batch.micro_batch_size_per_gpu", lambda v: UNSET if v == 1 else v, "unset at 1"),
        mapped("loss", "loss.loss_fn", _loss, "regular/dual_clip -> verl_grpo"),
        rejected("lora_rank", "set lora_rank=0", why="LoRA is not trained by the Arctic server"),
        not_applicable("critic", "the Arctic path trains no critic"),
        rejected("critic.path", "unset critic.path", accepts=lambda v: v == ""),
        passed_through("logger", "the framework's tracker"),
    ],
)
LEAVES = list(leaves(Trainer()))


def test_every_leaf_classified_and_nothing_stale():
    TABLE.check_complete(LEAVES)
    assert TABLE.kind_of("critic.lr") == "not applicable"  # the subtree entry
    assert TABLE.kind_of("critic.path") == "rejected unless default"  # its own entry wins
    assert TABLE.kind_of("placement.nodes") == "mapped"


def test_an_unclassified_leaf_and_a_stale_entry_fail_the_check():
    table = FieldTable("Toy 1.0", [e for e in TABLE.rows if getattr(e, "field", None) != "logger"])
    with pytest.raises(AssertionError, match=r"1 unclassified field\(s\)[\s\S]*  logger"):
        table.check_complete(LEAVES)
    table = FieldTable("Toy 1.0", [*TABLE.rows, passed_through("gone.field", "x")])
    with pytest.raises(AssertionError, match=r"naming no field[\s\S]*gone\.field"):
        table.check_complete(LEAVES)


def test_conflicting_classifications_are_refused():
    with pytest.raises(ValueError, match=r"lr: classified as mapped and passed through"):
        FieldTable("Toy", [mapped("lr", "optimizer.lr"), passed_through("lr", "x")])
    # One field may feed several core fields.
    FieldTable("Toy", [mapped("lr", "optimizer.lr"), mapped("lr", "loss.temperature")])


def test_translation_maps_rejects_and_lists_what_does_not_apply():
    cfg = Trainer(placement=Placement(8, 4), lr=3e-6, micro=4, critic=Critic(lr=2e-5), logger="wandb")
    result = TABLE.translate(reader(cfg), reader(Trainer()), LEAVES)
    assert result.issues == []
    assert result.values == {
        "placement.training_gpus": 32,
        "optimizer.lr": 3e-6,
        "batch.micro_batch_size_per_gpu": 4,
        "loss.loss_fn": "verl_grpo",
    }
    assert result.core_data()["placement"] == {"training_gpus": 32}
    assert result.not_applied == [NotAppliedSetting("critic.lr", 2e-5, "the Arctic path trains no critic")]


def test_unset_leaves_the_core_default_and_defaults_are_not_listed():
    result = TABLE.translate(reader(Trainer()), reader(Trainer()), LEAVES)
    assert "batch.micro_batch_size_per_gpu" not in result.values
    assert result.not_applied == [] and result.issues == []


def test_every_problem_at_once_with_field_value_and_fix():
    cfg = Trainer(lora_rank=8, loss="gspo", critic=Critic(path="/m"))
    result = TABLE.translate(reader(cfg), reader(Trainer()), LEAVES)
    rendered = [issue.render() for issue in result.issues]
    assert rendered == [
        "loss = \"gspo\": no Arctic loss computes 'gspo'. Fix: set loss=regular",
        'critic.path = "/m": not supported on the Arctic path. Fix: unset critic.path',
        "lora_rank = 8: LoRA is not trained by the Arctic server. Fix: set lora_rank=0",
    ]
    # accepts: a non-default value that is allowed is not a problem
    ok = TABLE.translate(reader(Trainer(critic=Critic(path=""))), reader(Trainer()), LEAVES)
    assert ok.issues == []


def test_core_issues_are_named_by_the_framework_fields():
    cfg = Trainer(placement=Placement(3, 1))
    data = TABLE.translate(reader(cfg), reader(Trainer()), LEAVES).core_data()
    data["placement"]["ulysses_sequence_parallel_size"] = 2
    with pytest.raises(ConfigError) as info:
        ArcticRLConfig.from_dict(data)
    named = [TABLE.in_framework_terms(i, extension_prefix="toy.arctic") for i in info.value.issues]
    assert named[0].path == "placement.gpus_per_node / placement.nodes (core placement.training_gpus)"
    assert "(in Toy 1.0: set placement.gpus_per_node / placement.nodes)" in named[0].remedy
    other = TABLE.in_framework_terms(
        dataclasses.replace(info.value.issues[0], path="zorro.enable"), extension_prefix="toy.arctic"
    )
    assert other.path == "toy.arctic.zorro.enable"


def test_markdown_has_one_row_per_entry():
    text = TABLE.markdown()
    rows = text.strip().splitlines()
    assert rows[0] == "| Toy 1.0 field | how | core field / reason / fix |"
    assert len(rows) == 2 + len(TABLE.rows)
    assert (
        "| `placement.gpus_per_node`, `placement.nodes` | gpus_per_node x nodes | `placement.training_gpus` |"
        in rows
    )
    assert "| `critic` | not applicable | the Arctic path trains no critic |" in rows


def _critic_lr_without_critic(fields):
    if fields("critic.path") is None and fields.changed("critic.lr"):
        return Found(names={"lr": fields("critic.lr")})
    return None


def _micro_over_gpus(fields):
    gpus = fields("placement.gpus_per_node") * fields("placement.nodes")
    return Found(names={"gpus": gpus}) if fields("micro") > gpus else None


def _wandb_notice(fields):
    return "the tracker is wandb: set WANDB_API_KEY" if fields("logger") == "wandb" else None


RULED = FieldTable(
    "Toy 1.0",
    TABLE.rows,
    [
        Rule(
            "a critic lr needs a critic",
            ("critic.lr", "critic.path"),
            _critic_lr_without_critic,
            "critic.lr={lr} is set but no critic.path",
            "unset critic.lr",
        ),
        Rule(
            "micro-batch within the GPUs",
            ("micro", "placement.gpus_per_node", "placement.nodes"),
            _micro_over_gpus,
            "exceeds the {gpus} GPUs",
            "lower micro to <= {gpus}",
        ),
    ],
    [Notice("tracker", ("logger",), _wandb_notice)],
)


def test_rules_report_every_problem_with_the_rows_and_notices_are_said():
    cfg = Trainer(micro=9, lora_rank=8, critic=Critic(lr=2e-5), logger="wandb")
    result = RULED.translate(reader(cfg), reader(Trainer()), LEAVES)
    # the rows' problems and the rules' problems in the same round
    assert [issue.render() for issue in result.issues] == [
        "lora_rank = 8: LoRA is not trained by the Arctic server. Fix: set lora_rank=0"
    ]
    assert [issue.render() for issue in result.rule_issues] == [
        "critic.lr = 2e-05: critic.lr=2e-05 is set but no critic.path. Fix: unset critic.lr",
        "micro = 9: exceeds the 1 GPUs. Fix: lower micro to <= 1",
    ]
    assert result.notices == ["the tracker is wandb: set WANDB_API_KEY"]
    fine = RULED.translate(reader(Trainer()), reader(Trainer()), LEAVES)
    assert fine.rule_issues == [] and fine.notices == []
    assert RULED.check_rules(Fields(reader(cfg), reader(Trainer()))) == result.rule_issues


def test_rules_must_read_classified_fields_that_exist():
    with pytest.raises(ValueError, match=r"rule r: reads nowhere\.field, which no row classifies"):
        FieldTable("Toy", TABLE.rows, [Rule("r", ("nowhere.field",), bool, "p", "f")])
    with pytest.raises(ValueError, match="rule r: declared twice"):
        FieldTable(
            "Toy", TABLE.rows, [Rule("r", ("lr",), bool, "p", "f"), Rule("r", ("lr",), bool, "p", "f")]
        )
    # under a subtree row, but no field of the installed config: caught by the completeness check
    stale = FieldTable("Toy", TABLE.rows, [Rule("r", ("critic.gone",), bool, "p", "f")])
    with pytest.raises(AssertionError, match=r"1 rule input\(s\) naming no field[\s\S]*r: critic\.gone"):
        stale.check_complete(LEAVES)
    RULED.check_complete(LEAVES)


def test_marked_section_round_trip():
    text = "a\n<!-- t:start -->\nold\n<!-- t:end -->\nb\n"
    new = replace_marked_section(text, "t", "new\n")
    assert new == "a\n<!-- t:start -->\nnew\n<!-- t:end -->\nb\n"
    assert marked_section(new, "t") == "new\n"
    with pytest.raises(ValueError, match="missing"):
        marked_section("x", "t")


LEGACY = LegacyKeys(
    "toy.arctic",
    [
        Alias("use_zorro", "zorro.enable"),
        Alias("vllm_max_num_seqs", "vllm.max_num_seqs"),
        Alias(
            "logits_optimization",
            "zorro.logits_optimization",
            lambda v: "none" if v is None else v,
            "null -> none",
        ),
        Replaced("colocate", "set toy.colocate_all=true", "colocation is the framework's own field now"),
    ],
)


def test_legacy_keys_alias_reject_and_pass_on():
    result = LEGACY.resolve({"use_zorro": False, "logits_optimization": None, "colocate": True, "batch.x": 1})
    assert result.values == {"zorro.enable": False, "zorro.logits_optimization": "none"}
    assert result.rest == {"batch.x": 1}
    assert result.notices[0] == (
        "toy.arctic.use_zorro is the old integration's name: read as toy.arctic.zorro.enable; "
        "write toy.arctic.zorro.enable to silence this notice"
    )
    assert [i.render() for i in result.issues] == [
        "toy.arctic.colocate = true: a key of the old integration; colocation is the framework's own "
        "field now. Fix: set toy.colocate_all=true"
    ]
    assert "| `toy.arctic.use_zorro` | `toy.arctic.zorro.enable` | renamed |" in LEGACY.markdown()


def test_settings_table_names_backend_gpus_colocation_and_optimisations():
    cfg = ArcticRLConfig.from_dict(
        {
            "backend": {"kind": "ray"},
            "model": {"name": "Qwen/Qwen3-8B"},
            "checkpoint": {"path": "/ckpt"},
            "placement": {
                "training_gpus": 8,
                "sampling_gpus": 8,
                "sampling_tensor_parallel_size": 2,
                "colocate": True,
            },
            "batch": {"prompts_per_step": 8, "rollouts_per_prompt": 8, "micro_batch_size_per_gpu": 8},
            "zorro": {"enable": True, "logits_optimization": "memory"},
            "kernels": {"use_liger": True},
            "arctic_inference": {"enable": True, "fca": True},
        }
    )
    text = render_settings_table(
        cfg, framework="Toy 1.0", not_applied=[NotAppliedSetting("critic.lr", 2e-5, "no critic")]
    )
    rows = dict(settings_rows(cfg))
    assert rows["backend"] == "ray: the Arctic server's jobs on the local Ray cluster"
    assert rows["model"] == "Qwen/Qwen3-8B"
    assert rows["GPUs"] == "train 8 / sample 8 (4 engine(s) x TP 2) / log-prob 0"
    assert rows["colocation"].startswith("on")
    assert rows["ZoRRo prompt de-duplication"].startswith("on (groups of 8, micro-batch 8 rows")
    assert rows["Liger kernels"] == "on"
    assert rows["Arctic Inference"] == "on (FCA on, speculative decoding off)"
    assert rows["logits strategy"] == "memory"
    assert text.startswith("Arctic RL run settings (Toy 1.0)\n")
    assert (
        "  Toy 1.0 settings that do not apply on the Arctic path (1):\n    critic.lr = 2e-05: no critic\n"
        in text
    )


def test_settings_table_on_the_reference_backend_says_what_has_no_cpu_meaning():
    cfg = ArcticRLConfig.from_dict({"backend": {"kind": "reference"}})
    rows = dict(settings_rows(cfg))
    assert rows["backend"].startswith("reference: the CPU reference engine")
    assert rows["model"].startswith("tiny qwen3 built from seed 42")
    assert rows["Liger kernels"].endswith("(no CPU meaning: not run by the reference engine)")
    assert "settings that do not apply on the Arctic path: none set" in render_settings_table(
        cfg, framework="Toy"
    )
