"""scalestudy: plan, run, tune and report distributed pre-training of LLMs."""

__version__ = "0.1.0"
