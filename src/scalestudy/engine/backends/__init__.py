"""Engine backends behind one interface (`common.Backend`), chosen by `Strategy.engine`."""

from __future__ import annotations


def make_backend(model, cfg, strategy, layout, device):
    """Wrap `model` for the strategy's engine (imports only that engine's library)."""
    from scalestudy.specs.parallel_layout import needs_hybrid

    if needs_hybrid(strategy):  # tp/pp > 1: FSDP2 or replication over dp composed with TP and PP
        from scalestudy.engine.backends.hybrid import HybridBackend as cls
    elif strategy.engine == "deepspeed":
        from scalestudy.engine.backends.deepspeed import DeepSpeedBackend as cls
    elif strategy.engine == "fsdp":
        from scalestudy.engine.backends.fsdp import FSDPBackend as cls
    else:
        from scalestudy.engine.backends.ddp import DDPBackend as cls
    return cls(model, cfg, strategy, layout, device)
