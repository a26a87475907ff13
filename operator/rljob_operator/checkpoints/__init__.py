"""Checkpoint layouts of rljob, RLinf and verl: find, verify, and say how to resume."""
