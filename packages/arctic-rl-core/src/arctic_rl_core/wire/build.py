"""Build the dense `[B, P+R]` payload from per-sample rollouts, vectorised.

Per sample and field the work is one C call: a list or tuple is packed with `struct.pack_into`
straight into its row of the output (the fastest list-to-number conversion CPython offers, about
10 ns per element); an array or tensor is assigned as one row slice. No Python loop touches
tokens, and nothing is built at `[B, S]` size except the outputs themselves. The layout is
documented in `arctic_rl_core.wire`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arctic_rl_core.backends.protocol import WirePayload
from arctic_rl_core.wire.sample import RolloutSample
from arctic_rl_core.wire.spec import POST_APPLY_TEMPERATURE, POST_ENTROPY_AND_LOGPROBS, PayloadSpec

if TYPE_CHECKING:
    import numpy as np

# Largest value accepted as a log-prob (a little above 0 for float round-off).
_MAX_LOGPROB = 1e-3


class PayloadError(ValueError):
    """Samples or a payload that do not fit the wire contract; the message names the field."""


def build_forward_payload(samples: Sequence[RolloutSample], spec: PayloadSpec) -> WirePayload:
    """The payload of a no-grad forward (old or reference log-probs): model inputs only,
    `processing = {"post": [apply_temperature, compute_entropy_and_logprobs], "loss_fn": None}`,
    so old log-probs see the same temperature as the training forward."""
    layout = _Layout.of(samples, spec)
    batch = layout.model_inputs()
    meta = layout.meta()
    processing = {"post": [POST_APPLY_TEMPERATURE, POST_ENTROPY_AND_LOGPROBS], "loss_fn": None}
    return WirePayload(batch=_to_torch(batch), meta=meta, processing=processing)


def build_train_payload(samples: Sequence[RolloutSample], spec: PayloadSpec) -> WirePayload:
    """The payload of a forward-backward: model inputs plus the per-token loss tensors,
    `meta` with the loss settings and global token/sequence counts, and
    `processing = {"post": [apply_temperature, compute_entropy_and_logprobs], "loss_fn": spec.loss_fn}`.

    Every sample needs `old_logprobs`; `ref_logprobs` too when `spec.use_kl_loss`.
    `batch_num_tokens` / `global_batch_size` count this payload: send one payload per optimizer
    step (it is split across DP workers and GAS steps by the server)."""
    layout = _Layout.of(samples, spec)
    batch = layout.model_inputs()
    batch.update(layout.loss_inputs())
    response_mask = batch["response_mask"]
    meta = layout.meta()
    meta.update(
        batch_num_tokens=int(response_mask.sum()),
        global_batch_size=int(response_mask.shape[0]),
        actor_config=spec.actor_config(),
        policy_loss_config=spec.policy_loss_config(),
    )
    if not spec.loss_reads_unpacked_rows:
        meta.pop("cu_seqlens", None)  # the loss needs the packed layout (one row per micro-batch then)
    processing = {"post": [POST_APPLY_TEMPERATURE, POST_ENTROPY_AND_LOGPROBS], "loss_fn": spec.loss_fn}
    return WirePayload(batch=_to_torch(batch), meta=meta, processing=processing)


IGNORE_INDEX = -100  # a label the server's (and Hugging Face's) cross-entropy skips
SFT_LOSSES = frozenset({"sft", "sft_ce"})


def build_sft_payload(samples: Sequence[RolloutSample], spec: PayloadSpec) -> WirePayload:
    """The payload of a supervised forward-backward (`spec.loss_fn` "sft" or "sft_ce"): model inputs
    plus `labels` `[B, P+R]` = every response token at its own position, `IGNORE_INDEX` elsewhere
    (prompt and padding), `processing = {"post": [], "loss_fn": spec.loss_fn}` (the server runs no
    post-processor for these losses). `batch_num_tokens` counts the response tokens (sft_ce
    normalises by it); advantages and log-probs are not needed."""
    import numpy as np

    if spec.loss_fn not in SFT_LOSSES:
        raise PayloadError(
            f"PayloadSpec.loss_fn={spec.loss_fn!r}: a supervised payload needs one of {sorted(SFT_LOSSES)}"
        )
    layout = _Layout.of(samples, spec)
    batch = layout.model_inputs()
    response_B_S = batch["attention_mask"].copy()
    response_B_S[:, : layout.P] = False
    batch["labels"] = np.where(response_B_S, batch["input_ids"], IGNORE_INDEX).astype(np.int64)
    meta = layout.meta()
    meta.pop("cu_seqlens", None)  # the server's SFT pipeline never packs rows
    meta.update(batch_num_tokens=int(response_B_S.sum()), global_batch_size=int(response_B_S.shape[0]))
    return WirePayload(batch=_to_torch(batch), meta=meta, processing={"post": [], "loss_fn": spec.loss_fn})


# ----------------------------------------------------------------------------------------------
# Layout
# ----------------------------------------------------------------------------------------------


class _Layout:
    """Lengths of one batch; writes each per-sample sequence straight into its row of the
    `[B, P+R]` tensors (prompts end at column P, responses start there).

    Per sample the work is a few C calls (`struct.pack_into` for lists and tuples, one slice
    assignment for arrays and tensors); no Python code touches tokens, and no intermediate flat
    array or `[B, S]` boolean mask is built. Padding pages of `np.zeros` outputs are never
    written."""

    def __init__(self, samples: Sequence[RolloutSample], spec: PayloadSpec) -> None:
        self.samples = samples
        self.spec = spec
        self.B = len(samples)
        self.prompts = _rows([s.prompt_ids for s in samples], "prompt_ids", _INT64)
        self.responses = _rows([s.response_ids for s in samples], "response_ids", _INT64)
        self.prompt_lens, self.response_lens = _lengths(self.prompts), _lengths(self.responses)
        _check_lengths(self.prompt_lens, spec.max_prompt_len, "prompt_ids", "max_prompt_len", minimum=1)
        _check_lengths(
            self.response_lens, spec.max_response_len, "response_ids", "max_response_len", minimum=0
        )
        # the payload's own widths: the maxima, or the longest row rounded up (spec.pad_to_multiple)
        self.P, self.R = spec.payload_widths(int(self.prompt_lens.max()), int(self.response_lens.max()))
        self.S = self.P + self.R
        self.prompt_starts = (self.P - self.prompt_lens).tolist()
        self.real_ends = (self.P + self.response_lens).tolist()
        self.response_starts = [self.P] * self.B

    @classmethod
    def of(cls, samples: Sequence[RolloutSample], spec: PayloadSpec) -> _Layout:
        if not isinstance(spec, PayloadSpec):
            raise TypeError(f"spec must be a PayloadSpec, got {type(spec).__name__}")
        if isinstance(samples, RolloutSample) or not isinstance(samples, Sequence):
            raise PayloadError("samples must be a sequence of RolloutSample")
        if not samples:
            raise PayloadError("samples is empty: a payload needs at least one rollout")
        for i, sample in enumerate(samples):
            if not isinstance(sample, RolloutSample):
                raise PayloadError(f"samples[{i}] is a {type(sample).__name__}, expected RolloutSample")
        if len(samples) % spec.rows_multiple:
            raise PayloadError(
                f"batch of {len(samples)} rollouts does not split evenly across dp_size={spec.dp_size} x "
                f"grad_accum_steps={spec.grad_accum_steps} = {spec.rows_multiple}: send a multiple of "
                f"{spec.rows_multiple} rollouts (pad or drop) or change dp_size / grad_accum_steps"
            )
        if (spec.zorro_train_enable or spec.load_balancer) and len(samples) % spec.rollout_n:
            raise PayloadError(
                f"batch of {len(samples)} rollouts is not whole groups of rollout_n={spec.rollout_n}, which "
                "ZoRRo and the load balancer require: send complete groups"
            )
        return cls(samples, spec)

    def _grid(self, dtype: Any, fill: int = 0) -> np.ndarray:
        import numpy as np

        if fill == 0:
            return np.zeros((self.B, self.S), dtype=dtype)
        return np.full((self.B, self.S), fill, dtype=dtype)

    def meta(self) -> dict[str, Any]:
        return self.spec.base_meta(self.P, self.R)

    # -- model inputs --------------------------------------------------------------------------
    def model_inputs(self) -> dict[str, np.ndarray]:
        import numpy as np

        input_ids = self._grid(_INT64, self.spec.pad_token_id)
        _fill_rows(input_ids, self.prompts, self.prompt_starts, "prompt_ids")
        _fill_rows(input_ids, self.responses, self.response_starts, "response_ids")
        _check_token_ids(input_ids, self.P)
        attention_mask = self._grid(_BOOL)
        for row, start, end in zip(attention_mask, self.prompt_starts, self.real_ends, strict=True):
            row[start:end] = True
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            # the server reads only prompts.shape[1] (P): a [B, P, 0] tensor carries it in no bytes
            "prompts": np.zeros((self.B, self.P, 0), dtype=np.bool_),
        }
        if not self.spec.drop_position_ids:
            # position of the k-th real token of a row is k; padding is 0 (as the server rebuilds it)
            position_ids = self._grid(_INT64)
            positions = np.arange(self.S, dtype=np.int64)
            for row, start, end in zip(position_ids, self.prompt_starts, self.real_ends, strict=True):
                row[start:end] = positions[: end - start]
            batch["position_ids"] = position_ids
        return batch

    # -- loss inputs ---------------------------------------------------------------------------
    def loss_inputs(self) -> dict[str, np.ndarray]:
        spec, samples = self.spec, self.samples
        reads = spec.loss_reads()  # None: an unknown loss, send every per-token field
        response_mask = self._response_mask()
        out: dict[str, np.ndarray] = {"response_mask": response_mask, "advantages": self._advantages()}
        if reads is None:
            out["loss_mask"] = response_mask.copy()  # the codec would copy a shared array anyway
        if any(s.old_logprobs is None for s in samples):
            missing = [i for i, s in enumerate(samples) if s.old_logprobs is None][:5]
            raise PayloadError(
                f"old_logprobs is None for samples {missing}: a train payload needs old log-probs on every "
                "sample (run a forward payload first and use response_logprobs)"
            )
        out["old_log_probs"] = self._logprobs("old_logprobs")
        ref_present = [s.ref_logprobs is not None for s in samples]
        if spec.use_kl_loss and not all(ref_present):
            missing = [i for i, present in enumerate(ref_present) if not present][:5]
            raise PayloadError(
                f"use_kl_loss=True but ref_logprobs is None for samples {missing}: compute reference "
                "log-probs (forward with reference_model=True) or set use_kl_loss=False"
            )
        if any(ref_present):
            _require_all(ref_present, "ref_logprobs")
            if reads is None or "ref_log_prob" in reads:
                out["ref_log_prob"] = self._logprobs("ref_logprobs")
        rollout_present = [s.rollout_logprobs is not None for s in samples]
        if any(rollout_present):
            _require_all(rollout_present, "rollout_logprobs")
            if reads is None or "rollout_log_probs" in reads:
                out["rollout_log_probs"] = self._logprobs("rollout_logprobs")
        weights_present = [s.rollout_is_weights is not None for s in samples]
        if any(weights_present):
            _require_all(weights_present, "rollout_is_weights")
            out["rollout_is_weights"] = self._weights("rollout_is_weights")
        return out

    def _weights(self, attr: str) -> np.ndarray:
        """Non-negative finite per-token weights, response-aligned like the log-probs."""
        full = self._grid(_FLOAT32)
        _fill_rows(full, self._response_rows(attr, _FLOAT32), self.response_starts, attr)
        _check_finite(full, attr)
        if full.size and float(full.min()) < 0:
            raise PayloadError(
                f"{attr} holds negative values (min {float(full.min()):.4g}): weights are >= 0"
            )
        return full

    def _response_rows(self, attr: str, dtype: Any, rows: list[int] | None = None) -> list[Any]:
        """The `attr` sequences of the given rows (all by default), checked to be response-aligned."""
        indices = range(self.B) if rows is None else rows
        values = _rows([getattr(self.samples[i], attr) for i in indices], attr, dtype, indices)
        expected = self.response_lens if rows is None else self.response_lens[rows]
        _check_same_lengths(_lengths(values), expected, attr, rows)
        return values

    def _response_mask(self) -> np.ndarray:
        """0/1 per response token as bool; None on a sample means all ones."""
        import numpy as np

        given = [i for i, s in enumerate(self.samples) if s.response_mask is not None]
        full = self._grid(_INT8)
        for i in range(self.B) if len(given) < self.B else ():
            full[i, self.P : self.real_ends[i]] = 1
        if given:
            values = self._response_rows("response_mask", np.float64, given)
            # lists of small ints pack straight into the int8 rows; anything else is checked for
            # integral values first (a 0.5 must not truncate to 0), and out-of-range values fail
            integral = [
                v if type(v) is list or type(v) is tuple or v.dtype.kind in "iub" else _integral(v)
                for v in values
            ]
            for k, value in enumerate(integral):
                if type(value) is not list and type(value) is not tuple and value.size:
                    if int(value.max()) > 1 or int(value.min()) < 0:
                        bad = value[(value != 0) & (value != 1)]
                        raise PayloadError(
                            f"response_mask holds values other than 0/1 (e.g. {bad[0].item()!r}): use 0 or 1"
                        )
                    integral[k] = value.astype(np.int8)
            _fill_rows(full, integral, [self.P] * len(given), "response_mask", given, allow_floats=True)
            if int(full.max()) > 1 or int(full.min()) < 0:
                bad = full[(full != 0) & (full != 1)]
                raise PayloadError(
                    f"response_mask holds values other than 0/1 (e.g. {bad[0].item()!r}): use 0 or 1"
                )
        return full.view(np.bool_)  # 0/1 int8 bytes are valid bools: no copy

    def _logprobs(self, attr: str) -> np.ndarray:
        full = self._grid(_FLOAT32)
        _fill_rows(full, self._response_rows(attr, _FLOAT32), self.response_starts, attr)
        highest = _check_finite(full, attr)
        if highest > _MAX_LOGPROB:
            raise PayloadError(
                f"{attr} holds positive values (max {highest:.4g}): log-probs are <= 0; "
                "pass log-probabilities, not probabilities"
            )
        return full

    def _advantages(self) -> np.ndarray:
        values = [s.advantages for s in self.samples]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            if any(isinstance(v, (int, float)) for v in values):
                # mixed scalars and sequences: expand the scalars, then take the general path
                values = [
                    [float(v)] * int(n) if isinstance(v, (int, float)) else v
                    for v, n in zip(values, self.response_lens, strict=True)
                ]
            full = self._grid(_FLOAT32)
            rows = _rows(values, "advantages", _FLOAT32)
            _check_same_lengths(_lengths(rows), self.response_lens, "advantages")
            _fill_rows(full, rows, self.response_starts, "advantages")
            _check_finite(full, "advantages")
            return full
        import numpy as np

        _check_finite(np.asarray(values, dtype=np.float32), "advantages")
        full = self._grid(_FLOAT32)
        for row, value, end in zip(full, values, self.real_ends, strict=True):
            row[self.P : end] = value
        return full


# ----------------------------------------------------------------------------------------------
# Per-sample sequences -> rows
# ----------------------------------------------------------------------------------------------

_INT64, _INT8, _BOOL, _FLOAT32 = "int64", "int8", "bool", "float32"
_STRUCT_CODES = {"int64": "q", "int8": "b", "float32": "f", "float64": "d"}


def _rows(values: list[Any], attr: str, dtype: Any, indices: Sequence[int] | None = None) -> list[Any]:
    """Lists and tuples as they are (packed in C later); arrays and tensors as checked 1-D numpy."""
    indices = range(len(values)) if indices is None else indices
    return [
        v if type(v) is list or type(v) is tuple else _as_1d(v, f"samples[{i}].{attr}", dtype)
        for i, v in zip(indices, values, strict=True)
    ]


def _lengths(rows: list[Any]) -> np.ndarray:
    import numpy as np

    return np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))


def _fill_rows(
    target: np.ndarray,
    rows: list[Any],
    starts: list[int],
    attr: str,
    indices: Sequence[int] | None = None,
    *,
    allow_floats: bool = False,
) -> None:
    """Write `rows[k]` into row `indices[k]` of the C-contiguous `[B, S]` `target`, from column
    `starts[k]` (lengths already checked to fit).

    Lists/tuples are packed in C with `struct.pack_into` (one call per row), about 2x faster than
    `np.fromiter` and 10x faster than `torch.tensor`; arrays are assigned as one slice. With
    `allow_floats`, a list that does not pack as integers goes through numpy (for 0/1 masks given
    as floats; the caller checks the values)."""
    code = _STRUCT_CODES[target.dtype.name]
    item, S = target.dtype.itemsize, target.shape[1]
    indices = range(len(rows)) if indices is None else indices
    for row, value, start in zip(indices, rows, starts, strict=True):
        if type(value) is list or type(value) is tuple:
            try:
                struct.pack_into(f"{len(value)}{code}", target, (row * S + start) * item, *value)
                continue
            except (struct.error, TypeError, OverflowError) as exc:
                if not allow_floats:
                    expected = "integers" if code == "q" else f"{target.dtype.name}-representable numbers"
                    raise PayloadError(f"samples[{row}].{attr}: entries must be {expected} ({exc})") from None
                value = _integral(_as_1d(value, f"samples[{row}].{attr}", "float64"))
                if target.dtype.itemsize == 1 and value.size and (value.max() > 1 or value.min() < 0):
                    bad = value[(value != 0) & (value != 1)]
                    raise PayloadError(
                        f"{attr} holds values other than 0/1 (e.g. {bad[0].item()!r}): use 0 or 1"
                    ) from None
        target[row, start : start + len(value)] = value


def _integral(values: np.ndarray) -> np.ndarray:
    """Float 0/1 flags as integers; a fractional value is left for the 0/1 check to report."""
    if values.dtype.kind == "f" and (values % 1).any():
        bad = values[values % 1 != 0]
        raise PayloadError(f"response_mask holds values other than 0/1 (e.g. {bad[0].item()!r}): use 0 or 1")
    return values


def _check_token_ids(input_ids: np.ndarray, P: int) -> None:
    import numpy as np

    lowest = int(input_ids.min())
    if lowest < 0:
        row, column = divmod(int(np.argmin(input_ids)), input_ids.shape[1])
        field = "prompt_ids" if column < P else "response_ids"
        raise PayloadError(f"samples[{row}].{field} holds a negative token id ({lowest})")


def _as_1d(value: Any, name: str, dtype: Any) -> np.ndarray:
    import numpy as np

    if value is None:
        raise PayloadError(f"{name} is None")
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # torch tensor, without importing torch
        if value.dtype.is_floating_point and value.dtype.itemsize < 4:  # bf16/fp16 have no numpy twin
            value = value.float()
        value = value.detach().cpu().numpy()
    array = np.asarray(value)
    if array.ndim != 1:
        raise PayloadError(f"{name} has shape {array.shape}: expected a 1-D sequence")
    if np.dtype(dtype).kind in "iu" and array.size and array.dtype.kind not in "iub":
        raise PayloadError(f"{name} has dtype {array.dtype}: token ids must be integers")
    if array.dtype.kind not in "iubf":
        raise PayloadError(f"{name} has dtype {array.dtype}: expected numbers")
    return array


def _check_finite(values: np.ndarray, attr: str) -> float:
    """Raise unless every value is finite; returns the maximum (min/max propagate NaN and reach
    +-inf: two reductions, no temporary array)."""
    if not values.size:
        return 0.0
    lowest, highest = float(values.min()), float(values.max())
    if not (abs(lowest) < float("inf") and abs(highest) < float("inf")):
        raise PayloadError(f"{attr} holds NaN or infinite values: every response token needs a finite value")
    return highest


def _check_lengths(lengths: np.ndarray, limit: int, attr: str, limit_name: str, *, minimum: int) -> None:
    import numpy as np

    too_long = np.flatnonzero(lengths > limit)
    if too_long.size:
        i = int(too_long[0])
        raise PayloadError(
            f"samples[{i}].{attr} has {int(lengths[i])} tokens > {limit_name}={limit} "
            f"({too_long.size} sample(s) too long): raise {limit_name} or truncate"
        )
    too_short = np.flatnonzero(lengths < minimum)
    if too_short.size:
        i = int(too_short[0])
        raise PayloadError(f"samples[{i}].{attr} has {int(lengths[i])} tokens: needs at least {minimum}")


def _check_same_lengths(
    lengths: np.ndarray, response_lens: np.ndarray, attr: str, rows: list[int] | None = None
) -> None:
    import numpy as np

    wrong = np.flatnonzero(lengths != response_lens)
    if wrong.size:
        i = int(wrong[0])
        row = i if rows is None else rows[i]
        raise PayloadError(
            f"samples[{row}].{attr} has {int(lengths[i])} entries but response_ids has {int(response_lens[i])}: "
            "per-token fields are response-aligned (one entry per response token)"
        )


def _require_all(present: list[bool], attr: str) -> None:
    if not all(present):
        missing = [i for i, p in enumerate(present) if not p][:5]
        raise PayloadError(
            f"{attr} is set on some samples but None on samples {missing}: set it on all or none"
        )


def _to_torch(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(array) for name, array in batch.items()}
