"""The Megatron backend (`runner.backend=megatron`): megatron-core's GPTModel, tensor, pipeline
and data parallel, checkpointed with dist_checkpointing in RLinf's Megatron arrangement."""
