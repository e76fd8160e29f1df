"""Hyperparameter search (the `search` command): learning rate, batch size, warm-up and precision tuned on small
proxy models with Optuna, each trial a real `scalestudy train` run; the best settings' trend is extrapolated to the
target model. Strategy search (how to parallelise: `plan`, `tune`) lives in `scalestudy.plan`."""
