"""Which pipeline rank holds the embedding, a T5 decoder's embedding copy and the LM head: the chunks it holds
(costmodel/params.py rank_vocab_params; engine/parallel/stages.py split_model builds the same chunks)."""

import pytest

from scalestudy.costmodel.engines import copies_tied_modules
from scalestudy.costmodel.params import param_breakdown, params_per_device, rank_vocab_params
from scalestudy.costmodel.stages import stage_params
from scalestudy.specs.parallel_layout import chunk_layer_counts
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy


def _blocks(name):
    p = param_breakdown(get_model(name))
    return p, p.encoder_layer, p.decoder_layer


def test_interleaved_t5_base_rank_0_holds_both_embeddings_as_train_measured():
    # newcomer3's run: scalestudy train, t5-base, ddp, pp 2 interleaved x 4 chunks, fp32, 2 CPU ranks: rank 0's
    # peak_mem_bytes 2,375,418,384 B = 16 B (fp32 weight + grad + Adam's two moments) x 148,463,649 parameters.
    # Rank 0 runs chunks 0, 2, 4, 6 of 3 blocks: encoder blocks 0-2 and 6-8 with the encoder's embedding (chunk 0),
    # decoder blocks 0-2 and 6-8 with the decoder's copy of the shared embedding (chunk 4): 2 x 32,128 x 768.
    model = get_model("t5-base")
    st = Strategy(engine="ddp", pp=2, pp_schedule="interleaved", virtual_stages=4, precision="fp32")
    p, enc, dec = _blocks("t5-base")
    chunks = tuple(chunk_layer_counts(st, model.total_layers))
    by_hand = 6 * enc + 6 * dec + 2 * 32128 * 768 + p.other
    psi = params_per_device(model, 1, 2, 0, 0, chunks, copies_tied_modules("ddp"))
    assert psi == by_hand == 148_464_384  # was 123,790,080 (1.845 GiB of states): one embedding for both chunks
    assert psi * 16 == pytest.approx(2_375_418_384, rel=1e-5)
    assert chunks == (3,) * 8
    # rank 0: the two tables; rank 1 (chunks 1, 3, 5, 7: the same number of each block) the tied head's copy
    assert [rank_vocab_params(model, 2, chunks, k, 1, tied_copy=True) for k in (0, 1)] == [2 * p.embedding,
                                                                                          p.embedding]


@pytest.mark.parametrize("tied_copy, embeddings", [(False, 1), (True, 2)])
def test_t5_plain_pipeline_last_stage_holds_the_decoder_embedding_and_the_head(tied_copy, embeddings):
    # pp 2, 1F1B: stage 1 = the decoder, its first block (embedding copy) and the head. Megatron's stage reuses
    # that embedding as the output layer (tied_copy False); scalestudy's engine holds a second copy (True).
    model = get_model("t5-base")
    p, enc, dec = _blocks("t5-base")
    assert [rank_vocab_params(model, 2, (12, 12), k, 1, tied_copy=tied_copy) for k in (0, 1)] == [
        p.embedding, embeddings * p.embedding]
    # the busiest rank: the blocks' even-split bound + the most vocabulary tensors any rank holds
    assert params_per_device(model, 1, 2, 0, 0, (12, 12), tied_copy) == 6 * enc + 6 * dec + \
        embeddings * p.embedding + p.other
    # mixed clusters price each stage's own blocks
    assert stage_params(model, 1, 2, 0, 0, 12, tied_copy=tied_copy) == 12 * enc + p.embedding + p.other
    assert stage_params(model, 1, 2, 1, 12, 12, tied_copy=tied_copy) == 12 * dec + embeddings * p.embedding + p.other


def test_untied_mt5_pipeline_decoder_copy_sits_where_decoder_block_0_is():
    # mT5 unties the head: the decoder's embedding copy is still there (the shared table), the head its own weight
    model = get_model("mt5-base")
    p, enc, dec = _blocks("mt5-base")
    assert p.lm_head == p.embedding
    # pp 3 even split 8, 8, 8: stage 1 holds encoder blocks 8-11 and decoder blocks 0-3 (+ the copy)
    assert stage_params(model, 1, 3, 1, 8, 8) == 4 * enc + 4 * dec + p.embedding + p.other
    assert stage_params(model, 1, 3, 2, 16, 8) == 8 * dec + p.lm_head + p.other
    assert stage_params(model, 1, 3, 0, 0, 8) == 8 * enc + p.embedding + p.other
    # pp 2: the decoder's stage holds its embedding copy and the head (Megatron and the engine alike: untied);
    # tensor parallelism splits both over the vocabulary shards
    assert rank_vocab_params(model, 2, (12, 12), 1, 2) == p.embedding // 2 + p.lm_head // 2
    assert params_per_device(model, 2, 2, 0, 0, (12, 12)) - params_per_device(model, 2, 2) == 0  # even split
    assert params_per_device(model, 2, 2) - params_per_device(model, 2, 2, 1, 1) == -p.embedding


@pytest.mark.parametrize("name", ["gpt2", "llama-7b"])  # tied, untied
@pytest.mark.parametrize("pp, v", [(2, 2), (4, 2), (2, 3)])
def test_decoder_only_interleaved_embedding_on_rank_0_head_on_the_last_rank(name, pp, v):
    # chunk 0 (the embedding) is on rank 0 and chunk pp v - 1 (the head) on rank pp - 1 under every schedule
    model = get_model(name)
    p = param_breakdown(model)
    st = Strategy(engine="megatron", pp=pp, pp_schedule="interleaved", virtual_stages=v)
    chunks = tuple(chunk_layer_counts(st, model.total_layers))
    assert len(chunks) == pp * v
    head = p.lm_head or p.embedding  # tied: Megatron's copy on the last stage
    assert [rank_vocab_params(model, pp, chunks, k, 1) for k in range(pp)] == \
        [p.embedding] + [0] * (pp - 2) + [head]
    # the interleaved chunks move no decoder-only vocabulary: the 1F1B count, blocks / pp + the larger table
    assert params_per_device(model, 1, pp, 0, 0, chunks) == params_per_device(model, 1, pp) == \
        -(-p.layers_total // pp) + max(p.embedding, head) + p.other
