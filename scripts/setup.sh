#!/usr/bin/env bash
# Create .venv and install scalestudy in the one order that works on a CPU machine:
# torch first (pinned CPU build), then the rest. An unpinned torch pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[test]'
# An editable install leaves scalestudy's own sources uncompiled; where PYTHONDONTWRITEBYTECODE is set (CI images,
# containers) every command would recompile them (~0.2 s a call, ~19% of a `scalestudy plan`'s instructions).
.venv/bin/python -m compileall -q src
echo "scalestudy installed in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
