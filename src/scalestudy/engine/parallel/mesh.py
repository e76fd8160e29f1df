"""The (pp, dp, tp) device mesh: tp innermost (neighbouring ranks, the chattiest traffic), pp outermost."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass
class HybridMesh:
    mesh: DeviceMesh
    pp: int
    dp: int
    tp: int

    @property
    def pp_rank(self) -> int:
        return self.mesh.get_local_rank("pp")

    @property
    def dp_rank(self) -> int:
        return self.mesh.get_local_rank("dp")

    @property
    def tp_rank(self) -> int:
        return self.mesh.get_local_rank("tp")

    def sub(self, name: str) -> DeviceMesh:
        return self.mesh[name]

    def group(self, name: str):
        return self.mesh.get_group(name)


def build_mesh(device: torch.device, pp: int, dp: int, tp: int) -> HybridMesh:
    mesh = init_device_mesh(device.type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    return HybridMesh(mesh, pp, dp, tp)
