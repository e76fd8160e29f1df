"""Real distributed training: one Strategy -> DeepSpeed ZeRO 0-3 (+offload), DDP / ZeroRedundancyOptimizer, FSDP2.

    config.py      TrainConfig (YAML + flags), validation into (ModelSpec, Strategy, Workload, Layout)
    launch.py      run_local(cfg) through torchrun's launcher; launch_commands(cfg) for multi-node / Slurm
    train.py       the per-rank loop (`python -m scalestudy.engine.train --config DIR/train_config.yaml`)
    backends/      one Backend per engine: micro_step, optimizer_step, save, load, memory census
    models.py      randomly initialised HF models from a ModelSpec (same weights on every engine)
    checkpoint.py  atomic checkpoints with data-stream position and RNG; exact resume
    metrics.py     metrics.jsonl, TensorBoard, progress, summary medians
    memory.py      bytes of the tensors a rank holds (CPU memory per rank), RSS beside it
    probe.py       peak FLOP/s for MFU (device entry on GPU, measured matmul on CPU)
    data/          corpora, tokenizer, span corruption, knowledge masking, batch streams (data pipeline)
"""
