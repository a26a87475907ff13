"""TRL's real GRPOTrainer (tests/e2e/trl_grpo.py) with DataLoader workers, as a `framework: trl`
pod runs it: torchrun from the variables and the command the operator gives the pod (2
processes, gloo on CPU), every worker started in rljob's bridge laid out as the pod mounts the
job's launcher ConfigMap. The kubelet's SIGTERM to torchrun mid-run, which torchrun passes on
with `os.killpg` to each worker's whole process group, DataLoader workers included: the Trainer
saves the step it reached on notice, complete, with no step lost, and every worker exits 75 with
the termination message. (Not on a cluster: the job's pods and their preemption are the e2e
tests'.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from builders import make_job
from kube_steps import free_port, wait_for
from rljob_contract import (
    CHECKPOINTED_ON_REQUEST_MESSAGE,
    ENV_ATTEMPT,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_REQUEST_FILE,
    ENV_TERMINATION_LOG,
    progress,
)
from rljob_operator.api.spec import parse_spec
from rljob_operator.checkpoints import find_latest
from rljob_operator.launcher import podside, torchrun
from rljob_testenv.scenario import TORCHRUN

DRIVER = Path(__file__).resolve().parents[1] / "e2e" / "trl_grpo.py"
# More steps than the run reaches before the notice; no periodic save before the last.
STEPS = 500
FLAGS = [f"--max_steps={STEPS}", f"--save_steps={STEPS}", "--dataloader_num_workers=2"]
WORKER_NAME = "pt_data_worker"  # torch names its DataLoader workers so


def pod_command(launcher: Path, output_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The pod's command and torchrun's variables, as the operator makes them for this job,
    with the launcher ConfigMap's files laid out under `launcher` as the kubelet mounts them."""
    job = make_job(nnodes=1, framework="trl", nprocPerNode=2, rendezvousPort=free_port(),
                   command=["python", str(DRIVER)],
                   args=[f"--output_dir={output_dir}", *FLAGS])  # fmt: skip
    spec = parse_spec(job["spec"])
    for path, text in podside.launcher_files(torchrun.bridge_programs(spec)).items():
        (launcher / path).parent.mkdir(parents=True, exist_ok=True)
        (launcher / path).write_text(text)
    command = [*torchrun.command(spec, 0), *spec.args]
    assert command[:2] == ["torchrun", f"{podside.LAUNCHER_DIR}/rljob_hf_bridge.py"], command
    command = [str(TORCHRUN), str(launcher / "rljob_hf_bridge.py"), *command[2:]]
    return command, torchrun.env(spec, "127.0.0.1", 0)


def dataloader_workers(output_dir: Path) -> list[int]:
    """The pids of this run's DataLoader workers (they inherit the run's variables)."""
    mark = f"{ENV_CHECKPOINT_DIR}={output_dir}".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc / "comm").read_text().strip() == WORKER_NAME and mark in (
                proc / "environ"
            ).read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue  # gone, or not ours
    return pids


def last_step(output_dir: Path) -> dict | None:
    """The bridge's progress record (world rank 0 writes it at every step's end)."""
    try:
        return json.loads((output_dir / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    except (OSError, ValueError):
        return None


def test_trl_with_dataloader_workers_saves_on_torchruns_sigterm_and_loses_no_step(
    tmp_path: Path,
) -> None:
    output_dir, request = tmp_path / "run", tmp_path / "checkpoint-request"
    request.write_text("")  # projected, empty: the operator has not asked
    command, torchrun_env = pod_command(tmp_path / "launcher", output_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLJOB_", "PET_"))}
    env.update(torchrun_env)
    env.update({ENV_CHECKPOINT_DIR: str(output_dir), ENV_ATTEMPT: "0",
                ENV_CHECKPOINT_REQUEST_FILE: str(request),
                ENV_TERMINATION_LOG: str(tmp_path / "termination-log"),
                "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
    log = tmp_path / "torchrun.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Mid-run: a step has finished, and both ranks' DataLoader workers are up.
        wait_for(lambda: (last_step(output_dir) or {}).get("step"), 120, "a finished step")
        wait_for(lambda: len(dataloader_workers(output_dir)) >= 4, 60, "4 DataLoader workers")
        process.send_signal(signal.SIGTERM)  # the kubelet's, to the container's torchrun
        process.wait(120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    said = log.read_text()
    assert "exited unexpectedly" not in said and "killed by signal" not in said, said[-3000:]

    stopped = last_step(output_dir)
    assert stopped and stopped["status"] == progress.CHECKPOINTED_ON_REQUEST, said[-3000:]
    step = stopped["step"]
    assert 0 < step < STEPS
    latest = find_latest(output_dir, "hf-trainer", "deep")
    assert latest.step == step, (latest, said[-3000:])  # complete, and no step lost
    assert Path(latest.path) == output_dir / f"checkpoint-{step}"
    # Every worker exited 75 (torchrun exits 1 and hides the codes; the bridge says it last),
    # within torchrun's shutdown timeout: none needed its SIGKILL.
    exits = f"rljob: saved step {step} on notice (checkpoint-{step}); exiting with 75"
    assert said.count(exits) == 2, said[-3000:]
    assert "forcefully exiting via" not in said, said[-3000:]
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith(f"{CHECKPOINTED_ON_REQUEST_MESSAGE}: saved step {step}"), message
    # The DataLoader workers lived through the notice and end with their parents.
    wait_for(lambda: not dataloader_workers(output_dir), 30, "the DataLoader workers' end")
