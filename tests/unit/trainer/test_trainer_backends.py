"""The backend registry: every backend the operator accepts is a trainer, and a run picks one."""

from __future__ import annotations

import rljob_contract as contract
from rljob_trainer.backends import BACKENDS, backend
from rljob_trainer.train import Trainer


def test_every_backend_the_operator_accepts_is_registered_and_no_other() -> None:
    assert tuple(BACKENDS) == contract.BACKENDS


def test_each_registered_backend_is_a_trainer_with_its_own_step() -> None:
    for name in BACKENDS:
        trainer_class = backend(name)
        assert issubclass(trainer_class, Trainer), name
        assert not getattr(trainer_class.train_step, "__isabstractmethod__", False), name
