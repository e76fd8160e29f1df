"""Real distributed training: one Strategy -> DeepSpeed ZeRO 0-3 (+offload), DDP / ZeroRedundancyOptimizer, FSDP2.

    settings.py    the exact DeepSpeed JSON / FSDP2 / DDP arguments of a RunConfig (torch-free; plan --emit uses it)
    launch.py      run_local(cfg) through torchrun's launcher (cluster scripts: scalestudy.launch.commands)
    train.py       the per-rank loop (`python -m scalestudy.engine.train --config DIR/train_config.yaml`)
    backends/      one Backend per engine: micro_step, optimizer_step, save, load, memory census
    models.py      randomly initialised HF models from a ModelSpec (same weights on every engine)
    hf_model.py    ModelSpec -> transformers config and model (mT5 heads kept untied)
    checkpoint.py  atomic checkpoints with data-stream position and RNG; exact resume
    checkpoint_record.py  the `latest` pointer and meta.json, the launcher's --resume check (torch-free)
    metrics.py     metrics.jsonl, TensorBoard, progress, summary medians
    memory.py      bytes of the tensors a rank holds (CPU memory per rank), RSS beside it
    probe.py       peak FLOP/s for MFU (device entry on GPU, measured matmul on CPU)
    data/          corpora, tokenizer, span corruption, knowledge masking, batch streams (data pipeline)
"""
