"""`arctic-rl bench wire-bytes`: the three formats' byte counts, and the target on the recipe's shape."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from arctic_rl_testbed.bench import wire_bytes

pytest.importorskip("arctic_platform")
REPO = Path(__file__).resolve().parents[3]


def _args(**overrides) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    wire_bytes.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_defaults_are_the_bird_32b_recipes_maxima():
    from arctic_rl_core.config import load_config

    cfg = load_config(REPO / "recipes" / "configs" / "bird-qwen3-32b-32gpu.yaml", [])
    args = _args()
    assert (args.max_prompt_len, args.max_response_len) == (
        cfg.batch.max_prompt_length,
        cfg.batch.max_response_length,
    )
    assert args.zorro is cfg.zorro.enable is True
    assert (args.rows, args.rollouts) == (1024, 16)


def test_byte_counts_follow_each_documented_layout():
    args = _args(
        rows=32, rollouts=8, max_prompt_len=300, max_response_len=200, prompt_median=80, response_median=40
    )
    samples = wire_bytes.make_samples(args)
    (legacy, previous, lean), trained = wire_bytes.measure(args)
    assert trained == sum(len(s.response_ids) for s in samples)
    B, header = args.rows, 16_384  # the DSSST1 header (structure + meta JSON) is a few KB
    longest_prompt = max(len(s.prompt_ids) for s in samples)
    S_legacy = longest_prompt + args.max_response_len  # ZoRRo: the response region stays at the maximum
    # legacy: 3 x int64 [B, S] + prompts int64 [B, P]; train adds responses [B, R], 2 masks int64, 2 floats
    assert 0 < legacy.forward - B * (24 * S_legacy + 8 * longest_prompt) < header
    assert 0 < legacy.forward_backward - B * (48 * S_legacy + 8 * S_legacy) < header
    S_full = args.max_prompt_len + args.max_response_len
    assert 0 < previous.forward - B * (24 * S_full + 8 * args.max_prompt_len) < header
    assert 0 < previous.forward_backward - B * (48 * S_full + 8 * args.max_prompt_len) < header
    P_lean = -(-longest_prompt // 64) * 64
    S_lean = P_lean + args.max_response_len
    # lean: int64 ids + bool mask; train adds a bool response_mask and two float32 tensors
    assert 0 < lean.forward - B * 9 * S_lean < header
    assert 0 < lean.forward_backward - B * 18 * S_lean < header


def test_recipe_shaped_step_meets_the_3x_target_and_prints_the_ratio_last(capsys):
    from arctic_rl_testbed.bench.report import print_result

    result = wire_bytes.run(_args(rows=256))
    print_result(result)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"ratio: {result.ratio:.2f}x"
    assert result.ratio >= 3.0
    information, peak = result.more
    samples = wire_bytes.make_samples(_args(rows=256))
    assert information.baseline_value == sum(wire_bytes.information_bytes(samples, float_fields=2))
    assert information.ours_value == result.ours_seconds > information.baseline_value  # padding, masks
    assert peak.ours_value >= peak.baseline_value  # the encoded body itself is resident at the peak


def test_information_is_tokens_lengths_and_floats_without_padding():
    from arctic_rl_core.wire import RolloutSample

    samples = [RolloutSample(prompt_ids=[1, 2, 3], response_ids=[4, 5]) for _ in range(2)]
    forward, train = wire_bytes.information_bytes(samples, float_fields=2)
    assert forward == 2 * (4 * 5 + 8)  # int32 tokens, two int32 lengths per row
    assert train == forward + 2 * 2 * 4 * 2  # two float32 values per response token
