"""Launching runs: the text that starts them and the processes that run them.

    commands.py     the launcher text: torchrun single / multi-node and Slurm sbatch scripts
    process.py      one trial as a process: start, watch (pruning callback), stop its whole tree, result
    outcome.py      how a finished trial process ended: OK / OOM / FAILED / TIMEOUT
    capped_exec.py  what runs first inside a trial process: memory cap and parent-death signal, then exec
    parent_death.py a process that dies with its parent (PR_SET_PDEATHSIG), for trials and training ranks

Standard library only: the study runner, tune and the hyperparameter search import it without torch.
"""
