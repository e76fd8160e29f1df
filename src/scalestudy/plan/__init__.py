"""Strategy search (the `plan` and `tune` commands): enumerate every dp x tp x pp x engine x ZeRO x offload x
recompute x micro-batch strategy (space.py), rank them with the cost model (planner.py), write what runs (emit.py),
and measure the best-predicted ones for real (tuner.py). Hyperparameter search lives in `scalestudy.search`."""
