"""DeepSpeed ZeRO-3 on an encoder-decoder: the device runs only what the host thread has launched, so a pass's first
stack's hooks cannot hide behind its second stack's device time (zero3.launch_order_s, zero3.stack_order)."""

from scalestudy.costmodel import terms
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.zero3 import launch_order_s, stack_order
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_launch_order_is_the_flow_shop_bound():
    # 1 s of device time, 0.8 s of host time: a host-light first stack hides everything (max form); a host-heavy first
    # stack (0.6 s of the host's 0.8) ahead of a device-heavy second (70% of the device's 1 s) cannot: 0.6 + 0.7
    assert launch_order_s(1.0, 0.8, 0.2, 0.3) == 1.0
    assert abs(launch_order_s(1.0, 0.8, 0.6, 0.7) - 1.3) < 1e-12
    assert launch_order_s(0.2, 0.8, 0.6, 0.7) == 0.8  # host-bound throughout: the hooks' host time
    assert launch_order_s(1.0, 0.0, 0.0, 0.0) == 1.0  # no hooks (FSDP, other engines)


def test_t5_encoder_holds_the_flops_decoder_the_module_calls():
    # at 512 / 114 the encoder's blocks run over 4.5x the decoder's positions, while a decoder block calls more
    # modules (its cross-attention sublayer): the forward runs the device-heavy stack first, the backward last
    m = get_model("t5-large")
    o = stack_order(m, "eager", False, 5e-6, "none", 512, 114)
    assert 0.6 < o.encoder_share < 0.9
    assert o.decoder_calls > 1.2 * o.encoder_calls
    assert stack_order(get_model("gpt2-medium"), "eager", False, 5e-6, "none", 1024, 0) is None


def _t5_step(mb: int, ordered: bool, monkeypatch) -> float:
    if not ordered:  # the pass as max(device, host) alone: the host's hooks anywhere in the pass
        monkeypatch.setattr(terms, "launch_order_s", lambda device, host, first, share: max(device, host))
    terms._SHAPES.clear()
    work = Workload(global_batch=8 * mb, seq_len=512, target_len=136)
    st = Strategy(engine="deepspeed", zero=3, micro_batch=mb, recompute="full", attention="eager")
    out = estimate(get_model("t5-3b"), make_cluster("a100-40gb", 1, 8), st, work).step_s
    monkeypatch.undo()
    return out


def test_decoder_hooks_first_in_the_backward_are_not_hidden(monkeypatch):
    # a T5 3B under ZeRO-3 with a full recompute on 8 A100: at micro-batch 16 the backward's device time about
    # equals its hooks', but the decoder's hooks come first and the encoder's device work after them -- the step
    # grows (reached +16%); at 1 the hooks bound both stacks (host-bound: the hooks' time, no change); at 64 the
    # decoder's own device time hides its hooks (no change)
    grows = {mb: _t5_step(mb, True, monkeypatch) / _t5_step(mb, False, monkeypatch) for mb in (1, 16, 64)}
    assert grows[16] > 1.1, grows
    assert abs(grows[1] - 1.0) < 1e-9 and abs(grows[64] - 1.0) < 1e-9, grows
