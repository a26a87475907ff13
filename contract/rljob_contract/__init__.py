"""The contract between the operator and the trainer processes it launches.

The one package that both rljob_operator and rljob_trainer import, so that the trainer
never imports the operator. It holds these names, `steps` (the `global_step_N` folder
names), `progress` (progress.json: the last finished step), `manifest` (the seal the rljob
trainer writes last into every checkpoint and the operator checks), `request` (the checkpoint
request's value) and `untrusted` (parsing JSON read from a checkpoint volume). An environment
variable, an annotation or an exit code is spelled here once. Nothing here imports anything
but the standard library, and it runs on Python 3.10 too: the Ray launcher ships it into the
user's image (launcher.ray).
"""

from __future__ import annotations

# Environment variables the operator sets on every trainer container.
ENV_ATTEMPT = "RLJOB_ATTEMPT"
ENV_RESUME_DIR = "RLJOB_RESUME_DIR"  # absolute path of a global_step_N folder, no trailing slash
ENV_RESUME_STEP = "RLJOB_RESUME_STEP"
ENV_CHECKPOINT_DIR = "RLJOB_CHECKPOINT_DIR"  # the folder that holds the global_step_N folders
ENV_SAVE_INTERVAL = "RLJOB_SAVE_INTERVAL"
ENV_MAX_TO_KEEP = "RLJOB_MAX_TO_KEEP"
ENV_CHECKPOINT_REQUEST_FILE = "RLJOB_CHECKPOINT_REQUEST_FILE"
# The pod's terminationGracePeriodSeconds: how long a save on notice may take after SIGTERM.
ENV_GRACE_SECONDS = "RLJOB_GRACE_SECONDS"
# Ray jobs (RLinf, verl): the pod's notice file, which rljob's Ray launcher creates on a
# notice and its bridge reads inside the framework's loop.
ENV_NOTICE_FILE = "RLJOB_NOTICE_FILE"
# Every pod that runs one of rljob's bridges (Ray's, TRL's): spec.saveOnNotice.
ENV_SAVE_ON_NOTICE = "RLJOB_SAVE_ON_NOTICE"  # "true" or "false"
NOTICE_FILE_NAME = "rljob-notice"  # in Ray's temp dir, a pod-local emptyDir
# Ray jobs: what the operator tells the node program (rljob_podside.ray_node) on every pod.
ENV_RAY_HEAD_ADDRESS = "RLJOB_RAY_HEAD_ADDRESS"  # host:port of the head's GCS
ENV_RAY_NNODES = "RLJOB_RAY_NNODES"
ENV_RAY_JOIN_TIMEOUT = "RLJOB_RAY_JOIN_TIMEOUT_SECONDS"
# Written by the head just before it starts the driver; the head's readiness probe reads it.
ENV_RAY_DRIVER_MARKER = "RLJOB_RAY_DRIVER_MARKER"
# Where rljob sees a framework's steps: a pod-local file that the trainer (or rljob's bridge
# into its loop, or the Ray head's node program, from the progress record) creates once the
# attempt has finished a training step in this container. The pod's readiness probe tests
# it, so the pod turns Ready then, which is how the operator learns of the first step without
# any request per step; a restarted container starts without it.
ENV_TRAINED_MARKER = "RLJOB_TRAINED_MARKER"
# rljob's own trainer only: `spec.backend`, which its runner.backend follows.
ENV_BACKEND = "RLJOB_BACKEND"
BACKENDS = ("fsdp", "megatron")

# The operator asks a running trainer to checkpoint now by annotating its pod; a
# downward-API volume projects the annotation's value (`request`) into
# ENV_CHECKPOINT_REQUEST_FILE, which is empty until the annotation exists.
CHECKPOINT_REQUEST_ANNOTATION = "rljob.io/checkpoint-request"
PODINFO_MOUNT_PATH = "/etc/rljob/podinfo"
CHECKPOINT_REQUEST_FILE_NAME = "checkpoint-request"

# The trainer's exit code for "saved a checkpoint and stopped because it was asked to"
# (SIGTERM or a checkpoint request). 75 is EX_TEMPFAIL: try again later.
EXIT_CHECKPOINTED_ON_REQUEST = 75
# torchrun does not pass its workers' exit codes on (it exits 1), so the trainer also
# writes this line into the container's termination message, which the operator reads.
CHECKPOINTED_ON_REQUEST_MESSAGE = "rljob: checkpointed on request"
# A Ray node that stopped because its pod was told to go (SIGTERM) without a save on notice,
# or a Trainer under rljob's bridge that stopped on notice at a step the Trainer did not save
# (save_strategy "best"), begins its termination message with this, whatever its exit code:
# the end is the cluster's doing, not the trainer's.
STOPPED_ON_NOTICE_MESSAGE = "rljob: stopped on notice"
ENV_TERMINATION_LOG = "RLJOB_TERMINATION_LOG"  # where to write it; default below
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

# In-place restart (spec.restartPolicy.inPlace): the trainer container runs under rljob's
# pod-side wrapper (rljob_podside/rljob_in_place.py). The operator names the run a pod is to
# make in the pod annotation RUN_ANNOTATION, which a downward-API volume projects into
# RUN_FILE_NAME beside the checkpoint request: JSON {"attempt": N} (stop what runs and wait)
# or {"attempt": N, "args": [...], "env": {NAME: value or null}} (run attempt N with these
# arguments, and these variables set, or unset where null): rljob_contract.in_place. Told of
# a newer attempt, the wrapper stops its run and exits EXIT_RESTART_IN_PLACE; the container's
# restart rule (KEP-5532, action RestartAllContainers) has the kubelet start the pod's
# containers again in the same pod, where the wrapper waits for its next run. A run that ends
# by itself other than with 0 waits up to ENV_IN_PLACE_WAIT seconds for that word, and else
# ends the container as it would have ended without the wrapper.
EXIT_RESTART_IN_PLACE = 117
RUN_ANNOTATION = "rljob.io/run"
RUN_FILE_NAME = "run"
ENV_RUN_FILE = "RLJOB_RUN_FILE"
ENV_IN_PLACE_STATE_DIR = "RLJOB_IN_PLACE_STATE_DIR"  # a pod-local emptyDir: outlives the container
ENV_IN_PLACE_WAIT = "RLJOB_IN_PLACE_WAIT_SECONDS"
# In the state dir: the attempt the pod's trainer container last started (the wrapper writes it
# as it starts a run, a warm trainer as it takes one in its own process), "N\n", replaced whole.
IN_PLACE_STARTED_FILE = "started"
# Beside it: the attempt whose run a warm trainer has ended and whose state it holds, waiting for
# the next run in its process (a trainer that neither holds nor ends is stopped by the wrapper).
IN_PLACE_HOLDING_FILE = "holding"

# Warm restart (rljob's own trainer): the trainer forms its process group itself, once per
# attempt, at the gang's address (node 0's stable name) and port, so that a rank whose pod
# stays can keep its process and its state in memory and join the next attempt's group. On
# ENV_WARM_RESTART "true", torchrun starts only this node's processes (one node, its own
# rendezvous) and the trainer reads its place in the gang from these variables; after a stop on
# request it waits for the operator's next run in ENV_RUN_FILE (rljob_contract.in_place) and
# records the attempt it takes in ENV_IN_PLACE_STATE_DIR's IN_PLACE_STARTED_FILE.
ENV_WARM_RESTART = "RLJOB_WARM_RESTART"
ENV_GANG_ADDR = "RLJOB_GANG_ADDR"
ENV_GANG_PORT = "RLJOB_GANG_PORT"
ENV_NODE_RANK = "RLJOB_NODE_RANK"
ENV_NNODES = "RLJOB_NNODES"
