"""SkyRL's LoRA settings end to end on the Cortex emulator: SkyRL's `RayPPOTrainer.train()` ->
`ArcticBackend` -> the real arctic-platform 0.1.4 `CortexTransport` -> the emulator (in this process,
so the test can look at its engine), 2 GRPO steps with `trainer.policy.model.lora.*`."""

from __future__ import annotations

import pytest
import torch

E2E_LORA = [
    "trainer.policy.model.lora.rank=4",
    "trainer.policy.model.lora.alpha=8",
    "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",
]


@pytest.fixture(scope="module")
def cortex_lora_run(tmp_path_factory, learnable_jsonl):
    pytest.importorskip("tenacity")  # arctic-platform[cortex]
    from arctic_rl_testbed.reference.settings import ReferenceEngineSettings
    from cortex_emulator import PAT, TOKEN_ENV, InProcessCortex
    from skyrl_e2e_run import TINY_GRPO, TINY_MODEL, run_grpo
    from wire_server import tiny_model_dir

    root = tmp_path_factory.mktemp("skyrl_cortex_lora")
    model_dir = tiny_model_dir(root / "model", 7, **TINY_MODEL)
    data = learnable_jsonl  # a graded reward: the group's advantages are not all 0, so the adapters move
    cortex = InProcessCortex(PAT, ReferenceEngineSettings(num_threads=1, colocated=False), root / "files")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(TOKEN_ENV, PAT)
            exp = run_grpo(
                [
                    *cortex.overrides("trainer.arctic_rl."),
                    *E2E_LORA,
                    f"trainer.policy.model.path={model_dir}",
                    f"data.train_data=['{data}']",
                    "trainer.seed=7",
                    "trainer.algorithm.use_kl_loss=false",  # Cortex: no reference log-probs
                    "trainer.algorithm.use_entropy_loss=false",
                    "trainer.policy_mini_batch_size=2",  # one optimizer step per batch (Cortex)
                    "trainer.update_epochs_per_batch=1",
                    "trainer.max_training_steps=2",
                    f"trainer.ckpt_path={root / 'ckpt'}",
                    "trainer.ckpt_interval=100",
                    "trainer.resume_mode=none",
                ],
                base=TINY_GRPO,
            )
        [job] = cortex.emulator.jobs.values()
        assert job.engine is not None
        yield exp, job, model_dir
    finally:
        cortex.stop()


def test_skyrl_lora_on_the_cortex_emulator_trains_and_syncs_adapters(cortex_lora_run):
    from arctic_rl_testbed.reference.lora import is_adapter
    from skyrl_e2e_run import logged_steps

    exp, job, _ = cortex_lora_run
    # what reached Cortex: training.peft on both sub-jobs (the real client's to_cortex())
    configs = {sub["job_type"]: sub for sub in job.sub_jobs}
    peft = configs["training"]["training_config"]["peft_config"]
    assert peft == configs["sampling"]["inference_config"]["peft_config"] == job.peft
    assert (peft["r"], peft["lora_alpha"], peft["target_modules"]) == (4, 8, ["q_proj", "v_proj"])
    engine = job.engine
    assert sorted(logged_steps(exp)) == [1, 2] and engine.global_step == 2
    # only the adapters trained: the base is still the model directory's weights
    from arctic_rl_testbed.reference.model import build_model, load_tokenizer

    base_model = build_model(engine.settings.model, 7, load_tokenizer(engine.settings.model))
    base = {f"base_model.model.{n}": p for n, p in base_model.named_parameters()}
    trained = engine.trainer_parameters()
    for name, tensor in trained.items():
        if is_adapter(name):
            continue
        key = name.replace(".base_layer.", ".")
        assert torch.equal(tensor, base[key].detach()), name
    adapters = [n for n in trained if is_adapter(n)]
    assert len(adapters) == 4 and all(
        not torch.equal(trained[n], torch.zeros_like(trained[n])) for n in adapters
    )
    # the client's weight sync asked for LoRA format; only the adapters travelled
    sync = engine.last_sync
    assert sync.weight_format == "lora" and sync.transfer.num_tensors == 4 and sync.weights_version == 2
    sampler = engine.sampler_parameters()
    assert all(torch.equal(sampler[n], trained[n]) for n in trained)
