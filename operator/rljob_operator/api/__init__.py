"""The RLTrainingJob API as plain data: the spec parsed with its defaults, and status helpers."""
