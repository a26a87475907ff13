"""Where a process sits in a warm gang (`rljob_trainer.gang`), from rljob's variables: read
before torch is imported, for the log's rank too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import rljob_contract as contract


class GangError(ValueError):
    """The gang's variables are missing or not numbers."""


@dataclass(frozen=True)
class Place:
    """Where this process sits in the gang: its node's rank among `nnodes`, its own among the
    node's `local_world` processes (torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE)."""

    addr: str
    port: int
    node_rank: int
    nnodes: int
    local_rank: int = 0
    local_world: int = 1

    @property
    def rank(self) -> int:
        return self.node_rank * self.local_world + self.local_rank

    @property
    def world_size(self) -> int:
        return self.nnodes * self.local_world


def place_from_env(env: Mapping[str, str]) -> Place | None:
    """This process's place where the gang restarts warm (ENV_WARM_RESTART), else None."""
    if env.get(contract.ENV_WARM_RESTART, "").lower() != "true":
        return None
    names = (contract.ENV_GANG_ADDR, contract.ENV_GANG_PORT, contract.ENV_NODE_RANK,
             contract.ENV_NNODES)  # fmt: skip
    missing = [name for name in names if not env.get(name)]
    if missing:
        raise GangError(f"{contract.ENV_WARM_RESTART}=true needs {', '.join(missing)}")
    try:
        place = Place(
            addr=env[contract.ENV_GANG_ADDR],
            port=int(env[contract.ENV_GANG_PORT]),
            node_rank=int(env[contract.ENV_NODE_RANK]),
            nnodes=int(env[contract.ENV_NNODES]),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            local_world=int(env.get("LOCAL_WORLD_SIZE", "1")),
        )
    except ValueError as exc:
        raise GangError(f"the gang's variables must be numbers: {exc}") from None
    if not (0 <= place.node_rank < place.nnodes and 0 <= place.local_rank < place.local_world):
        raise GangError(f"node {place.node_rank} of {place.nnodes}, process {place.local_rank} "
                        f"of {place.local_world} is no place in a gang")  # fmt: skip
    return place
