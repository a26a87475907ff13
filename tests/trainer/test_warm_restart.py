"""A warm restart of rljob's trainer, two CPU ranks as two nodes' processes: the rank whose pod
stays keeps its process and its state, the lost rank's new process loads its shard from the
save on notice, and the run is bitwise the uninterrupted one.

Each rank is started as its pod's torchrun would start it in a warm gang (one process per node,
the gang's address and the node's rank in rljob's variables, `rljob_trainer.gang`). The test
plays the operator: it sends the lost pod's SIGTERM and writes the kept pod's run file, as the
downward API projects the `rljob.io/run` annotation.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import rljob_contract as contract
from helpers import (
    Run,
    assert_same_metrics,
    assert_same_weights,
    final_weights,
    metrics,
    run,
    start,
    trainer_command,
    wait_for_step,
)
from kube_steps import free_port, wait_for
from rljob_contract.in_place import RunWord, format_word
from rljob_contract.manifest import MANIFEST_NAME

MAX_STEPS = 8
CONFIG = [f"runner.max_steps={MAX_STEPS}", "runner.save_interval=100"]  # saves on notice only
WORD_WAIT_SECONDS = 30


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The same two ranks under torchrun, uninterrupted."""
    handle = run(tmp_path_factory.mktemp("baseline"), CONFIG)
    assert handle.process.returncode == 0, handle.log()[-3000:]
    return handle


class Gang:
    """The ranks of a warm gang on this machine, each with its own run file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()

    def run_file(self, rank: int) -> Path:
        return self.folder / f"run-{rank}"

    def state_dir(self, rank: int) -> Path:
        """The pod's state dir, which its wrapper keeps and a warm trainer writes into."""
        folder = self.folder / f"state-{rank}"
        folder.mkdir(exist_ok=True)
        return folder

    def said(self, rank: int, name: str) -> str | None:
        path = self.state_dir(rank) / name
        return path.read_text().strip() if path.exists() else None

    def start(self, rank: int, attempt: int, extra: dict[str, str] | None = None) -> Run:
        self.run_file(rank).touch()
        env = {
            contract.ENV_WARM_RESTART: "true",
            contract.ENV_GANG_ADDR: "127.0.0.1",
            contract.ENV_GANG_PORT: str(self.port),
            contract.ENV_NODE_RANK: str(rank),
            contract.ENV_NNODES: "2",
            contract.ENV_ATTEMPT: str(attempt),
            contract.ENV_RUN_FILE: str(self.run_file(rank)),
            contract.ENV_IN_PLACE_STATE_DIR: str(self.state_dir(rank)),
            contract.ENV_IN_PLACE_WAIT: str(WORD_WAIT_SECONDS),
            **(extra or {}),
        }
        return start(self.folder, CONFIG, nproc=1, env=env, log_name=f"rank{rank}-attempt{attempt}")

    def name_run(self, rank: int, word: RunWord) -> None:
        path = self.run_file(rank)
        part = path.with_suffix(".part")
        part.write_text(format_word(word))
        part.replace(path)  # as the kubelet swaps a projected file


def resume_env(folder: Path, step: int) -> dict[str, str]:
    return {contract.ENV_RESUME_DIR: str(folder), contract.ENV_RESUME_STEP: str(step)}


def resume_run(gang: Gang, attempt: int, folder: Path, step: int, *extra: str) -> RunWord:
    """The operator's run for a kept pod: the trainer's arguments with the resume switch."""
    args = trainer_command(gang.folder, [*CONFIG, *extra, f"runner.resume_dir={folder}"], 1)[3:]
    return RunWord(attempt, args=tuple(args), env=resume_env(folder, step))


def lose_rank(gang: Gang, ranks: dict[int, Run], lost: int) -> tuple[Path, int]:
    """The lost rank's pod is told to go after step 3: the gang saves, the lost rank ends with
    75 and the other holds. The folder of the save on notice and its step."""
    wait_for_step(ranks[0], 3)
    ranks[lost].process.send_signal(signal.SIGTERM)
    assert ranks[lost].wait(120) == contract.EXIT_CHECKPOINTED_ON_REQUEST, ranks[lost].log()[-3000:]
    progress = json.loads((ranks[0].checkpoint_dir / "progress.json").read_text())
    step = progress["step"]
    folder = ranks[0].checkpoint_dir / f"global_step_{step}"
    assert (folder / MANIFEST_NAME).is_file()
    kept = ranks[1 - lost]
    wait_for(lambda: "holding step" in kept.log(), 60, "the kept rank holds its state")
    assert f"holding step {step} of attempt 0 in memory" in kept.log()
    assert kept.process.poll() is None
    return folder, step


@pytest.mark.parametrize("lost", [1, 0], ids=["worker-lost", "store-host-lost"])
def test_the_kept_rank_restarts_warm_and_the_run_is_bit_exact(
    baseline: Run, tmp_path: Path, lost: int
) -> None:
    gang = Gang(tmp_path)
    ranks = {rank: gang.start(rank, 0) for rank in (0, 1)}
    folder, step = lose_rank(gang, ranks, lost)
    kept = 1 - lost
    gang.name_run(kept, RunWord(1))  # the operator's stop word comes first: the rank waits on
    gang.name_run(kept, resume_run(gang, 1, folder, step))
    replacement = gang.start(lost, 1, resume_env(folder, step))
    assert replacement.wait(180) == 0, replacement.log()[-3000:]
    assert ranks[kept].wait(60) == 0, ranks[kept].log()[-3000:]

    # What the kept pod's wrapper reads: the trainer held attempt 0's state, and took attempt 1.
    assert gang.said(kept, contract.IN_PLACE_HOLDING_FILE) == "0"
    assert gang.said(kept, contract.IN_PLACE_STARTED_FILE) == "1"
    kept_log = ranks[kept].log()  # rank 0 logs from INFO on, the others from WARNING on
    assert f"warm restart: attempt 1 with step {step} kept in memory" in kept_log
    assert f"resumed at step {step} from the state this rank kept" in kept_log
    assert "resumed from" not in kept_log  # read no checkpoint
    told = "not holding this rank's state: this rank's own pod was told to go (SIGTERM)"
    assert told in ranks[lost].log()
    if lost == 0:
        assert f"resumed from {folder} at step {step}" in replacement.log()
    report = ranks[0] if kept == 0 else replacement  # rank 0 writes the weights and metrics
    assert_same_weights(final_weights(report, MAX_STEPS), final_weights(baseline, MAX_STEPS))
    assert_same_metrics(metrics(baseline), metrics(report))
    attempts = {e["step"]: e["attempt"] for e in metrics(report)}
    assert {attempts[s] for s in range(1, step + 1)} == {0}
    assert {attempts[s] for s in range(step + 1, MAX_STEPS + 1)} == {1}


def test_without_a_word_the_kept_rank_ends_as_its_run_did(tmp_path: Path) -> None:
    gang = Gang(tmp_path)
    wait = {contract.ENV_IN_PLACE_WAIT: "2"}
    ranks = {rank: gang.start(rank, 0, wait) for rank in (0, 1)}
    lose_rank(gang, ranks, lost=1)
    assert ranks[0].wait(60) == contract.EXIT_CHECKPOINTED_ON_REQUEST
    assert "no run named after attempt 0: ending as the run did" in ranks[0].log()
    assert gang.said(0, contract.IN_PLACE_STARTED_FILE) is None  # it took no run


def test_a_run_that_changes_the_configuration_gets_a_new_process(tmp_path: Path) -> None:
    gang = Gang(tmp_path)
    ranks = {rank: gang.start(rank, 0) for rank in (0, 1)}
    folder, step = lose_rank(gang, ranks, lost=1)
    gang.name_run(0, resume_run(gang, 1, folder, step, "runner.max_num_checkpoints=1"))
    assert ranks[0].wait(60) == contract.EXIT_CHECKPOINTED_ON_REQUEST
    assert "attempt 1 changes runner.max_num_checkpoints: this process ends" in ranks[0].log()


def test_the_operators_word_alone_stops_a_warm_gang_which_saves_and_holds(
    baseline: Run, tmp_path: Path
) -> None:
    """Both pods stay (the operator named a new attempt, as for a gang it restarts in place
    for a reason of its own): every rank saves, holds, and goes on in its own process."""
    gang = Gang(tmp_path)
    ranks = {rank: gang.start(rank, 0) for rank in (0, 1)}
    wait_for_step(ranks[0], 3)
    for rank in (0, 1):
        gang.name_run(rank, RunWord(1))
    for rank in (0, 1):
        wait_for(lambda r=rank: "holding step" in ranks[r].log(), 60, f"rank {rank} holds")
    step = json.loads((ranks[0].checkpoint_dir / "progress.json").read_text())["step"]
    folder = ranks[0].checkpoint_dir / f"global_step_{step}"
    assert "the operator named attempt 1" in ranks[0].log()
    for rank in (0, 1):
        gang.name_run(rank, resume_run(gang, 1, folder, step))
    for rank in (0, 1):
        assert ranks[rank].wait(180) == 0, ranks[rank].log()[-3000:]
        assert "resumed from" not in ranks[rank].log()
    assert_same_weights(final_weights(ranks[0], MAX_STEPS), final_weights(baseline, MAX_STEPS))
    assert_same_metrics(metrics(baseline), metrics(ranks[0]))
