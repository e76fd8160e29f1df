"""One real DeepSpeed 0.19.8 launch for the unit tier's two probes (tests/unit/conftest.py runs it once per session):
which optimizer DeepSpeed steps for train's settings (test_deepspeed_optimizer_wrapper.py) and the tensor bytes it
holds for a bf16 run by its gradient accumulation dtype (test_grad_accum_dtype.py). Each probe had its own launch:
the torch + DeepSpeed imports of a rank (~8 CPU-s) were paid three times, now twice (the two ranks).

Built in child processes (deepspeed.initialize wants its own process group): 2 gloo ranks, the DeepSpeed config
engine/settings.deepspeed_config writes for `train` (grad_accum_dtype = the compute dtype; "fp32" overrides it, the
published runs' setting), torch AdamW as the client optimizer.

CLASS_CASES (precision, zero, pipe): a two-Linear model plain (DeepSpeedEngine) or as a one-stage PipelineModule
(PipelineEngine: pipeline_parallelism), built only; the optimizer's class. fp16 is not checked: DeepSpeed's CPU
accelerator refuses it ("Type fp16 is not supported on your device"). DeepSpeed picks the wrapper from the config
(zero stage, precision, pipeline), not from the world size, so 2 ranks answer what 1 rank did.

BYTE_CASES (zero, pipe, grad_accum_dtype): four bf16 Linear layers plain or as a one-stage PipelineModule, two
steps. Tensor bytes by role at the wrapper's step() entry of the second step (after the last micro-batch's backward)
and after it (Adam's moments exist): the parameters, their .grad, the wrapper's accumulation buffer (BF16_Optimizer
fp32_groups_gradients_flat), its fp32 master partition (fp32_groups_flat_partition /
single_partition_of_fp32_groups / FP16_UnfusedOptimizer fp32_groups) and the client optimizer's state. CPU: no
allocator peak, the tensors themselves.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

CLASS_CASES = [("bf16", 0, False), ("bf16", 0, True), ("bf16", 1, True)]  # the bf16 pipeline's rule and neighbours
BYTE_CASES = [(0, True, "compute"), (1, False, "compute"), (1, False, "fp32")]
WORLD = 2

PROBE = r'''
import gc, json, logging, os, sys
import torch, deepspeed
from deepspeed.pipe import PipelineModule
from scalestudy.engine.settings import deepspeed_config
from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Strategy, Workload
deepspeed.utils.logger.setLevel(logging.ERROR)
deepspeed.init_distributed(dist_backend="gloo")
world, GA = int(os.environ["WORLD_SIZE"]), 2
cases = json.loads(sys.argv[1])

def config_for(zero, precision):
    run = RunConfig.build("gpt2-tiny", Strategy(engine="deepspeed", zero=zero, precision=precision),
                          Workload(global_batch=2 * GA * world, seq_len=8), nproc=world, nnodes=1)
    return deepspeed_config(run, cuda=False)

def roles(engine):
    opt, out, seen = engine.optimizer, {}, set()
    params = list(engine.module.parameters())
    masters = list(getattr(opt, "fp32_groups_flat_partition", [])) + list(
        getattr(opt, "single_partition_of_fp32_groups", []))
    for group in getattr(opt, "fp32_groups", None) or []:
        masters += list(group)
    state = [v for s in engine.basic_optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    for role, tensors in (("weights", params), ("grads", [p.grad for p in params]),
                          ("accumulator", getattr(opt, "fp32_groups_gradients_flat", [])),
                          ("optimizer", masters + state)):
        for t in tensors:
            if t is None or not t.untyped_storage().nbytes() or t.untyped_storage().data_ptr() in seen:
                continue
            seen.add(t.untyped_storage().data_ptr())
            out[role] = out.get(role, 0) + t.untyped_storage().nbytes()
    return out

res = {}
for zero, pipe, accum in cases["bytes"]:
    config = config_for(zero, "bf16")
    if accum == "fp32":
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256) for _ in range(4)]
    model = PipelineModule(layers, num_stages=1, loss_fn=torch.nn.MSELoss()) if pipe else torch.nn.Sequential(*layers)
    psi = sum(p.numel() for p in model.parameters())
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()), config=config)
    snaps, step = {}, [0]
    inner = engine.optimizer.step
    def stepped(*a, **k):
        if step[0] == 1:
            snaps["backward"] = roles(engine)
        return inner(*a, **k)
    engine.optimizer.step = stepped
    x, y = torch.randn(2, 256, dtype=torch.bfloat16), torch.randn(2, 256, dtype=torch.bfloat16)
    for step[0] in range(2):
        if pipe:
            engine.train_batch(iter([(x, y)] * 4 * GA))
        else:
            for _ in range(GA):
                engine.backward(torch.nn.functional.mse_loss(engine(x), y))
                engine.step()
    snaps["after"] = roles(engine)
    res[f"{zero} {int(pipe)} {accum}"] = {"psi": psi, "wrapper": type(engine.optimizer).__name__, **snaps}
    del engine, model, layers
    gc.collect()
classes = {}
for precision, zero, pipe in cases["classes"]:
    layers = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)]
    model = PipelineModule(layers, num_stages=1, loss_fn=torch.nn.MSELoss()) if pipe else torch.nn.Sequential(*layers)
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()),
                                      config=config_for(zero, precision))
    classes[f"{precision} {zero} {int(pipe)}"] = type(engine.optimizer).__name__
    del engine, model, layers
    gc.collect()
if int(os.environ["RANK"]) == 0:
    print("MEASURED " + json.dumps({"classes": classes, "bytes": res}))
'''


def run_probe(rank_env) -> dict:
    """{"classes": {"precision zero pipe": class name}, "bytes": {"zero pipe accum": {...}}} from rank 0 of one
    launch; `rank_env` is tests/conftest.py's deepspeed_rank_env."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases = json.dumps({"classes": CLASS_CASES, "bytes": BYTE_CASES})
    procs = [subprocess.Popen([sys.executable, "-c", PROBE, cases], env=rank_env(rank, WORLD, port),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(WORLD)]
    outs = [p.communicate(timeout=300) for p in procs]
    line = [x for x in outs[0][0].splitlines() if x.startswith("MEASURED ")]
    assert all(p.returncode == 0 for p in procs) and line, outs[0][1][-2000:] + outs[1][1][-2000:]
    return json.loads(line[0].split(" ", 1)[1])
