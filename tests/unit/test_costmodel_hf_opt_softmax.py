"""Hugging Face OPTAttention's eager score passes in fp16 (Strategy.attention_kernel hf-fp32-softmax,
costmodel/eager_kernels.HF_FP32_SOFTMAX_BYTES): mask add, torch.max clamp, half-to-float softmax, cast back."""

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.eager_kernels import HF_FP32_SOFTMAX_BYTES, gpt_score_bytes
from scalestudy.costmodel.memory import eager_fp32_softmax
from scalestudy.costmodel.step import compute_times
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device
from scalestudy.specs.model import from_shape
from scalestudy.specs.strategy import Strategy

OPT_1_3B = {"d_model": 2048, "layers": 24, "heads": 32, "vocab": 50272, "seq": 512, "ffn": "relu"}


def test_opt_score_bytes_are_the_gpt2_pattern_plus_the_fp32_softmax_round_trip():
    # forward: add 4, max 4, softmax half->float 6, .to(fp16) 6, dropout 5 = 25; backward 5 + 6 + 10 + 6 = 27
    assert tuple(g + x for g, x in zip(gpt_score_bytes(2), HF_FP32_SOFTMAX_BYTES)) == (25.0, 27.0)


def test_opt_softmax_adds_its_bytes_over_every_score_of_the_micro_batch():
    model, v100 = from_shape("opt-1.3b", OPT_1_3B, "test"), get_device("v100-32gb")
    kw = dict(precision="fp16", tp=1, micro_batch=8, seq_len=512, target_len=0, recompute="none", flash=False,
              sp=False, cal=stored(), kernels="eager")
    base = compute_times(model, v100, **kw)
    opt = compute_times(model, v100, attention_kernel="hf-fp32-softmax", **kw)
    scores = 8 * 32 * 24 * 512 * 512
    assert opt.forward - base.forward == pytest.approx(scores * 4.0 / v100.hbm_bytes_per_s)
    assert opt.backward - base.backward == pytest.approx(scores * 8.0 / v100.hbm_bytes_per_s)
    assert eager_fp32_softmax(model, Strategy(engine="deepspeed", zero=2, precision="fp16", attention="eager",
                                              attention_kernel="hf-fp32-softmax"))


@pytest.mark.parametrize("attention, precision", [("flash", "fp16"), ("eager", "bf16")])
def test_hf_fp32_softmax_is_refused_outside_fp16_eager_attention(attention, precision):
    with pytest.raises(ScalestudyError, match="hf-fp32-softmax describes Hugging Face OPT's eager attention"):
        Strategy(engine="deepspeed", precision=precision, attention=attention, attention_kernel="hf-fp32-softmax")
