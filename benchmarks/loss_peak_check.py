"""Peak bytes per logit of torchtitan's loss, eager, under DTensor loss_parallel and compiled (read-only check behind
costmodel/memory.loss_parallel_peak_bytes and compiled_loss_peak_bytes; docs/costmodel-validation.md, memory3).

torchtitan's loss_fn is F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) on bf16 logits, the
caller's `del pred` before loss.backward(). Eager and loss_parallel (the logits a Shard(-1) DTensor on a 1-rank gloo
mesh: torch's loss_parallel handlers run as on tp ranks) are measured by torch.distributed._tools.mem_tracker (live
storages; the head's inputs and their gradients, ~0.03 B per logit here, are in the figure). The compiled loss is read
off AOTAutograd's min-cut partition (what the forward saves for the backward), since a dispatch-mode tracker makes
torch.compile fall back to eager; Inductor's backward allocates one gradient of the logits' dtype
(TORCH_LOGS=output_code shows it).

    .venv/bin/python benchmarks/loss_peak_check.py        # CPU, ~1 min; expects ~12 / ~16 B and the saved set
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel

B, S, V, H = 2, 256, 8192, 64
N = B * S * V


def loss_fn(pred, labels):
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def measured(kind: str, mesh) -> float:
    labels = torch.randint(0, V, (B, S))
    h = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(H, V, dtype=torch.bfloat16, requires_grad=True)
    tracker = MemTracker()
    with tracker:
        pred = h @ w  # the head: bf16 logits, a non-leaf as in the run
        if kind == "loss_parallel":
            pred = DTensor.from_local(pred, mesh, [Shard(2)], run_check=False)
            with loss_parallel():
                loss = loss_fn(pred, labels)
                del pred
                loss.backward()
        else:
            loss = loss_fn(pred, labels)
            del pred
            loss.backward()
    peak = tracker.get_tracker_snapshot("peak")
    return next(v["Total"] for d, v in peak.items() if str(d).startswith("cpu")) / N


def compiled_saved() -> list[str]:
    graphs = {}
    backend = aot_autograd(fw_compiler=lambda gm, ex: graphs.setdefault("fw", gm),
                           bw_compiler=lambda gm, ex: gm, partition_fn=min_cut_rematerialization_partition,
                           decompositions=select_decomp_table())
    pred = torch.randn(B, S, V, dtype=torch.bfloat16, requires_grad=True)
    torch.compile(loss_fn, backend=backend)(pred, torch.randint(0, V, (B, S))).backward()
    outs = [n for n in graphs["fw"].graph.nodes if n.op == "output"][0].args[0][1:]  # [0] is the loss
    return [f"{tuple(o.meta['val'].shape)} {o.meta['val'].dtype}" for o in outs if "val" in o.meta]


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    for kind in ("eager", "loss_parallel"):
        print(f"{kind:14s} peak {measured(kind, mesh):5.2f} B per logit (model: 12 / 16, + the head's inputs, ~0.03)")
    print("compiled: saved for backward:", "; ".join(compiled_saved()),
          "(model: the 16-bit logits + 2 fp32 per token, then a 16-bit gradient: 2a per logit)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
