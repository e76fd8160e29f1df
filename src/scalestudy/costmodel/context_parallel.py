"""Context parallelism (Strategy.cp): every sequence's tokens split over cp ranks, attention run as a ring.

The mechanism priced (Megatron-Core's context parallelism, docs/source/api-guide/context_parallel.rst, on Transformer
Engine's AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py;
torchtitan's CP runs the same ring through torch's context_parallel):
- each rank holds seq_len / cp tokens of every sequence it trains; a causal sequence is cut into 2 x cp chunks and
  rank r keeps chunks r and 2cp-1-r, so every rank holds an equal share of the causal triangle. Everything that
  works token by token -- the projection and FFN GEMMs, the element-wise kernels, the stored activations, the LM
  head and the loss, the tensor-parallel collectives -- is that of a run at seq_len / cp;
- attention runs cp steps per layer and pass: step 0 the local chunks' own causal block, steps 1..cp-1 the local
  queries against a K/V block received from the ring's previous rank, each of them half of a (seq/cp)^2 square,
  i.e. the work of one causal block at seq_len / cp. A rank executes cp such blocks: the sequence's attention / cp;
- while one block computes, the next K/V block travels (an isend / irecv pair to the ring's neighbours): cp - 1
  sends of K and V (2 x seq/cp x kv heads per tp rank x d_kv, the compute dtype) per layer forward; the backward
  passes the K/V again together with the dK/dV accumulators (twice the bytes). A send is exposed only where it
  outlasts the block it runs beside;
- the data-parallel gradient reduction and the distributed optimizer / FSDP sharding run over dp x cp ranks
  (Megatron-Core's data-parallel group with context parallelism; torchtitan's dp_shard_cp mesh), so the parameters,
  gradients and optimizer states of a rank are those of one of dp x cp data-parallel ranks.

So a rank is priced as one of dp x cp data-parallel ranks of a run at seq_len / cp and global batch x cp (the same
tokens per step, the same micro-batches per rank), plus the cp - 1 further attention blocks per layer and pass and
the ring's exposed sends; the step's model and hardware FLOPs are the whole sequences'. Not priced: the K/V receive
buffers (two blocks of one layer, transient) and the softmax statistics' per-step corrections (element-wise, small).
"""

from __future__ import annotations

from dataclasses import replace

from scalestudy.costmodel.comm import p2p_time
from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.costmodel.flops import attention_backward_factor, step_flops_per_sequence, target_length
from scalestudy.costmodel.memory import ACT_BYTES
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.step import _layer_gemms, flash_core_s
from scalestudy.costmodel.terms import attention_kernel
from scalestudy.errors import OptionError
from scalestudy.specs.hardware import ClusterSpec, DeviceSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Layout, Strategy, Workload, resolve_layout

# the causal sequence's split: 2 x cp chunks, two per rank (Megatron-Core's get_batch_on_this_cp_rank)
CHUNKS_PER_RANK = 2


def check_sequence(model: ModelSpec, st: Strategy, seq_len: int) -> None:
    """One line where a sequence cannot be split over st.cp ranks: a decoder-only model (the ring runs causal
    self-attention; no T5 stack has it), seq_len a multiple of 2 x cp (the load-balanced causal split; torch's
    context_parallel shards the same 2 x cp chunks round-robin)."""
    if model.is_encoder_decoder:
        raise OptionError(f"cp {st.cp}: context parallelism splits a decoder's causal sequence; {model.name} is an "
                          "encoder-decoder model", "cp")
    if seq_len % (CHUNKS_PER_RANK * st.cp):
        raise OptionError(f"cp {st.cp}: sequence length {seq_len} is not divisible by 2 x cp = "
                          f"{CHUNKS_PER_RANK * st.cp} (the load-balanced causal split into 2 x cp chunks)", "cp")


def ring_send_bytes(model: ModelSpec, micro_batch: int, seq_len: int, cp: int, tp: int, precision: str) -> float:
    """Bytes of one forward ring step's K/V send, one layer: the local K and V blocks, micro_batch x seq_len / cp
    tokens x the key/value heads a tensor-parallel rank holds (at least one: Megatron replicates a grouped-query head
    over the tp ranks that share it) x d_kv, in the compute dtype."""
    kv_heads = max(model.kv_heads / tp, 1.0)
    return 2.0 * micro_batch * (seq_len / cp) * kv_heads * model.d_kv * ACT_BYTES[precision]


def block_attention_s(model: ModelSpec, device: DeviceSpec, st: Strategy, tp: int, micro_batch: int, local_seq: int,
                      peak: float, cal: Calibration) -> float:
    """Forward seconds of one causal attention block at `local_seq` tokens, one micro-batch, all layers: the fused
    kernel's attention core as step.compute_times prices it (step.flash_core_s)."""
    kernel = attention_kernel(st, device)
    return sum(flash_core_s(model, device, kernel, flops, dim, lead, local_seq, peak, cal)
               for flops, dim, role, lead in _layer_gemms(model, micro_batch, local_seq, 0, tp) if role == "core")


def ring_terms(model: ModelSpec, cluster: ClusterSpec, st: Strategy, tp: int, micro_batch: int, seq_len: int,
               peak: float, cal: Calibration) -> tuple[float, float]:
    """(extra attention compute, exposed ring sends) seconds of one micro-batch, all layers, beyond a run at
    seq_len / cp: the cp - 1 further blocks forward and backward (backward_factor x forward, and once more forward
    under a recompute that re-runs attention), and each step's send beyond its block: forward the K/V, backward the
    K/V and dK/dV. The ring crosses nodes when the tp x cp ranks around it do not fit one node."""
    cp = st.cp
    local = seq_len // cp
    block_f = block_attention_s(model, cluster.device, st, tp, micro_batch, local, peak, cal)
    block_b = attention_backward_factor(True) * block_f
    layers = model.num_layers
    cross_node = tp * cp > cluster.gpus_per_node and cluster.nodes > 1
    send_f = p2p_time(ring_send_bytes(model, micro_batch, seq_len, cp, tp, st.precision), cross_node, cluster)
    send_b = p2p_time(2.0 * ring_send_bytes(model, micro_batch, seq_len, cp, tp, st.precision), cross_node, cluster)
    reruns = 1 if st.recompute in ("full", "selective") else 0  # the forward ring again before the backward
    extra = (cp - 1) * ((1 + reruns) * block_f + block_b)
    per_layer_f, per_layer_b = block_f / layers, block_b / layers
    exposed = (cp - 1) * layers * ((1 + reruns) * max(0.0, send_f - per_layer_f) + max(0.0, send_b - per_layer_b))
    return extra, exposed


def estimate_context_parallel(inner, model: ModelSpec, cluster: ClusterSpec, st: Strategy, workload: Workload,
                              options, calibration: Calibration | None, only_fitting: bool):
    """The Estimate of `st` (cp > 1): `inner` (estimate._estimate) prices a rank as one of dp x cp data-parallel
    ranks at seq_len / cp and global batch x cp (module docstring); the ring's further attention blocks and exposed
    sends are added per micro-batch on the busiest pipeline stage, in every slot and in the fill and drain; the FLOPs
    are the whole sequences'. None where `only_fitting` and it does not fit."""
    cp, s = st.cp, workload.seq_len
    check_sequence(model, st, s)
    # the user's layout first: the inner run's (global batch x cp over dp x cp ranks) would name numbers not typed
    resolve_layout(st, cluster.world_size, workload.global_batch)
    local = Workload(global_batch=workload.global_batch * cp, seq_len=s // cp, train_tokens=workload.train_tokens)
    est = inner(model, cluster, replace(st, cp=1), local, options, calibration, only_fitting, None)
    if est is None:
        return None
    cal = calibration or stored()
    lay, outer = est.layout, replace(est.strategy, cp=cp)  # the software resolved as priced, at this cp
    extra, exposed = ring_terms(model, cluster, outer, lay.tp, st.micro_batch, s, est.peak_flops, cal)
    stage_share = max(st.stage_split(model.total_layers)) / model.total_layers if lay.pp > 1 else 1.0
    extra, exposed = extra * stage_share, exposed * stage_share
    fill = (lay.pp - 1) / (st.virtual_stages if st.pp_schedule == "interleaved" else 1)
    compute_s = est.compute_s + lay.grad_accum * extra
    bubble_s = est.bubble_s + fill * (extra + exposed)
    cp_comm_s = lay.grad_accum * exposed
    t = target_length(model, workload)
    return replace(est, strategy=outer, workload=workload,
                   layout=Layout(world_size=lay.world_size, dp=lay.dp // cp, tp=lay.tp, pp=lay.pp,
                                 grad_accum=lay.grad_accum, cp=cp),
                   compute_s=compute_s, bubble_s=bubble_s, cp_comm_s=cp_comm_s,
                   step_s=est.step_s + (compute_s - est.compute_s) + (bubble_s - est.bubble_s) + cp_comm_s,
                   model_flops=workload.global_batch * step_flops_per_sequence(model, s, t, "none"),
                   hardware_flops=workload.global_batch * step_flops_per_sequence(
                       model, s, t, st.recompute, early_stop(outer)))
