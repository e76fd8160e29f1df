"""Tensor, pipeline and data parallelism composed on one device mesh for the Hugging Face models (issue 12).

- mesh.py:            the (pp, dp, tp) DeviceMesh and each rank's coordinates.
- stages.py:          the model cut into pipeline chunks (decoder-only; encoder then decoder for T5).
- tensor_parallel.py: Megatron-style column/row plans for Llama (incl. GQA), GPT-2 (fused q/k/v re-laid out per
                      rank) and T5 blocks, sequence parallelism.
- pipeline.py:        torch.distributed.pipelining stages and schedules (gpipe, 1f1b, interleaved).
- grads.py:           data-parallel reduction, tied-parameter sync across stages, global-norm clipping on the mesh.
- checkpoint.py:      sharded (torch.distributed.checkpoint) state under canonical parameter names.
- meta_init.py:       the model built on the meta device, each rank filling only its pieces with the 1-rank values.
The backend that composes them is engine/backends/hybrid.py; the torch-free layout checks that run before
any process starts are specs/parallel_layout.py.
"""
