"""Suite-wide defaults.

`local-cpu` predictions normally measure this machine once (~1 min, cached; costmodel/cpu_profile.py). Tests keep
the static `local-cpu.yaml` so their numbers do not depend on the machine or its load; a test that exercises the
measured profile sets SCALESTUDY_CPU_PROFILE itself (monkeypatch.delenv / setenv).
"""

import os

os.environ.setdefault("SCALESTUDY_CPU_PROFILE", "static")
