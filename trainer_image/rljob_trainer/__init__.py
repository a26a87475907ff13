"""rljob's reference trainer: resumable GRPO on FSDP2 with DCP checkpoints; see docs/trainer.md."""
