"""Strategy.grad_buckets: DDP's gradient buckets as a copy beside .grad (torch's default, the published runs) or as
the storage .grad views (gradient_as_bucket_view, what `train` sets) -- costmodel/memory.ddp_bucket_copy_bytes, the
step's temporary and stage_terms' copy-back. The probe runs train's own DDPBackend on a 1-rank gloo group and looks
at where the gradients live, so the test fails if train's DDP or the model's reading of it changes."""

import tempfile

import pytest
import torch

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import ddp_bucket_copy_bytes, step_temporary_bytes
from scalestudy.errors import ScalestudyError
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import RunConfig, as_trained, check_cost_model_only, train_software
from scalestudy.specs.strategy import Strategy, Workload, resolve_layout

PSI = 1e9


@pytest.mark.parametrize("buckets, accum, copy", [("engine", 1, 4), ("copy", 1, 4), ("copy", 4, 4), ("view", 1, 0),
                                                  ("view", 2, 4)])
def test_bucket_copy_by_view_and_accumulation(buckets, accum, copy):
    # with accumulation train's no_sync micro-batches form fresh .grad tensors beside the buckets (set_to_none)
    assert ddp_bucket_copy_bytes(PSI, buckets, accum) == copy * PSI


def test_the_step_holds_no_bucket_copy_beside_viewed_gradients():
    copy = step_temporary_bytes(PSI, 8, "ddp", 0, "bf16", True, "foreach", 1, "engine")
    view = step_temporary_bytes(PSI, 8, "ddp", 0, "bf16", True, "foreach", 1, "view")
    assert copy - view == 4 * PSI and view == 4 * PSI  # the foreach AdamW temporary stays


def _estimate(buckets: str, nodes: int, global_batch: int):
    st = Strategy(engine="ddp", zero=0, precision="bf16", micro_batch=16, recompute="full", grad_buckets=buckets)
    return estimate(get_model("t5-large"), make_cluster("h200", nodes, 8 if nodes > 1 else 1), st,
                    Workload(global_batch, 512))


def test_train_view_drops_the_copy_and_its_copy_back():
    view, copy = _estimate("view", 1, 16), _estimate("engine", 1, 16)  # one micro-batch a step: no copy
    assert view.memory.buffers == 0.0 and copy.memory.buffers == 4 * copy.params_per_device
    assert copy.memory.total - view.memory.total == pytest.approx(4 * copy.params_per_device)
    view, copy = _estimate("view", 1, 32), _estimate("engine", 1, 32)  # 2 micro-batches: the copy is kept
    assert view.memory.buffers == copy.memory.buffers > 0
    view, copy = _estimate("view", 2, 16 * 16), _estimate("engine", 2, 16 * 16)  # dp 16: DDP's copy back to .grad
    assert view.optimizer_s < copy.optimizer_s and view.compute_s == copy.compute_s


def test_train_runs_view_and_its_ddp_says_so():
    from scalestudy.engine.settings import ddp_settings

    model = get_model("t5-large")
    fields = dict(vars(Strategy(engine="ddp")))
    assert train_software(fields, model)["grad_buckets"] == "view"
    assert "grad_buckets" not in train_software({**fields, "tp": 2}, model)  # hybrid backend: no DDP
    assert "grad_buckets" not in train_software({**fields, "engine": "fsdp", "zero": 3}, model)
    assert as_trained(Strategy(engine="ddp"), model).grad_buckets == "view"
    run = RunConfig.build("t5-tiny", Strategy(engine="ddp"), Workload(8, 64), nproc=2)
    assert ddp_settings(run)["gradient_as_bucket_view"] is True
    check_cost_model_only(Strategy(engine="ddp", grad_buckets="view"), model)
    with pytest.raises(ScalestudyError, match="grad_buckets"):
        check_cost_model_only(Strategy(engine="ddp", grad_buckets="copy"), model)


def test_refusals_and_label():
    with pytest.raises(ScalestudyError, match="gradient_as_bucket_view"):
        Strategy(engine="fsdp", zero=3, grad_buckets="view")
    with pytest.raises(ScalestudyError, match="unknown grad_buckets"):
        Strategy(engine="ddp", grad_buckets="views")
    with pytest.raises(ScalestudyError, match="--engine ddp"):
        Constraints(engines=("deepspeed",), grad_buckets="copy")
    assert "grads-copy" in Strategy(engine="ddp", grad_buckets="copy").label
    assert "grads" not in Strategy(engine="ddp", grad_buckets="view").label  # train's value goes unnamed


def _grad_storages(params) -> int:
    return len({p.grad.untyped_storage().data_ptr() for p in params if p.grad is not None})


@pytest.mark.slow  # ~30 s on a loaded 2-core host: builds the HF model and a gloo group
def test_train_ddp_gradients_are_bucket_views_after_the_reduction():
    """train's DDPBackend on one gloo rank, t5-tiny, 2 micro-batches: after the no_sync one every parameter has its own
    .grad beside the buckets (the copy ddp_bucket_copy_bytes keeps with accumulation); after the reducing one every
    .grad is a view into the one bucket t5-tiny's 4 MB fills (25 MB cap) -- the storage holds exactly the gradients."""
    import torch.distributed as dist

    from scalestudy.engine.backends import make_backend
    from scalestudy.engine.hf_model import build_hf_model
    from scalestudy.engine.single_rank import init_single_rank_group

    created = not dist.is_initialized()
    init_single_rank_group()
    spec = get_model("t5-tiny")
    st = Strategy(engine="ddp", zero=0, precision="fp32", micro_batch=2)
    workload = Workload(4, 32, 8)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = RunConfig.build("t5-tiny", st, workload, nproc=1, steps=1, output=tmp)
            torch.manual_seed(0)
            backend = make_backend(build_hf_model(spec), cfg, st, resolve_layout(st, 1, 4), torch.device("cpu"))
            params = backend.params
            inputs = {"input_ids": torch.randint(0, spec.vocab_size, (2, 32)),
                      "labels": torch.randint(0, spec.vocab_size, (2, 8))}
            backend.micro_step(dict(inputs), last=False)
            assert _grad_storages(params) == len(params)
            backend.micro_step(dict(inputs), last=True)
            assert _grad_storages(params) == 1
            storage = params[0].grad.untyped_storage().nbytes()
            assert storage == 4 * sum(p.numel() for p in params)
            backend.optimizer_step()
            assert all(p.grad is None for p in params)  # set_to_none: the next step's grads start fresh
            backend.close()
    finally:
        if created:
            dist.destroy_process_group()


@pytest.mark.parametrize("args, key, value", [
    (["--engine", "ddp", "--set", "grad_buckets=view"], "grad_buckets", "view"),  # valid for the flag's engine
    (["--pp", "2", "--nproc", "2", "--global-batch", "8", "--engine", "ddp", "--set", "pp_schedule=gpipe"],
     "pp_schedule", "gpipe"),  # was refused as needing --pp >= 2
])
def test_train_checks_a_set_key_within_the_flags_given(tmp_path, args, key, value):
    """train's --set values are checked against the run the flags make, not the default run (engine deepspeed, pp 1):
    `--engine ddp --set grad_buckets=view` was refused as 'not deepspeed'."""
    import yaml

    from scalestudy.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "t5-tiny", "--seq-len", "32", "--target-len", "8", "--steps", "4", "--output",
              str(out), "--print-launch", "--device", "cpu", *args])
    assert exc.value.code in (0, None)
    assert yaml.safe_load((out / "train_config.yaml").read_text())["strategy"][key] == value
