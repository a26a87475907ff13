"""rljob's reference trainer: resumable GRPO on FSDP2 (DCP) or megatron-core
(dist_checkpointing); see docs/trainer.md."""
