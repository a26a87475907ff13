"""verl on a CPU-only machine, as test support (never shipped in an image): a CPU platform and
a CPU rollout backend, registered in every verl process through verl's plugin switch:

    VERL_USE_EXTERNAL_MODULES=rljob_verl_cpu VERL_PLATFORM=cpu
    VERL_ENGINE_DEVICE=cuda VERL_ENGINE_VENDOR=nvidia  # FSDP's engine is registered for cuda only
    python -m verl.trainer.main_ppo ... actor_rollout_ref.rollout.name=rljob_cpu \
        actor_rollout_ref.rollout.full_determinism=true \
        actor_rollout_ref.rollout.agent.default_agent_loop=rljob_cpu_single_turn

`import verl` imports this package in the driver, the TaskRunner, the workers and the rollout
servers alike. What each part fakes is in its module: `compat` (one patch: verl's TRL check),
`platform` (the accelerator), `rollout` (the inference engine), `agent_loop` (nothing: verl's
single-turn loop with a request id per sample, which the rollout seeds from) and `reward` (a
dense toy score, selected by config, not registered). hack/verl_cpu_probe/run.sh is the worked
example.
"""

from rljob_verl_cpu import agent_loop as agent_loop
from rljob_verl_cpu import compat as compat

# The platform next: a process that imports this package before verl (a rollout server
# unpickling its class) must have the "cpu" platform registered before anything asks for one.
from rljob_verl_cpu import platform as platform
from rljob_verl_cpu.rollout import NAME as ROLLOUT_NAME
from rljob_verl_cpu.rollout import register as _register_rollout

_register_rollout()

__all__ = ["ROLLOUT_NAME"]
