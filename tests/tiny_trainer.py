"""The reference trainer made small and fast for tests: a run of a dozen steps takes seconds on a
shared 2-core machine. Shared by the trainer tests and the end-to-end tests."""

TINY = [
    "runner.device=cpu",
    "model.n_layers=2",
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "algorithm.group_size=4",
    "data.prompts_per_step=4",
]
