"""Kueue's priority boost from the work a preemption would lose (spec.queueing.priorityBoost).

Kueue (v0.17, feature gate PriorityBoost, alpha) orders a ClusterQueue's preemption
candidates, and its queue, by the Workload's priority plus the signed integer in its
annotation `kueue.x-k8s.io/priority-boost`. rljob puts there what the running attempt would
lose if it were stopped now, so that of two jobs of one priority the one that would lose
least goes first. The room, one job a module:

- pricing: what a preemption would lose now, in GPU-seconds and points of boost;
- bounds: the job's policy within the administrator's limit, floors and the ceiling;
- guards: the ceiling below the next priority class up, and the Workload's owners;
- gate: the guards in their one order, and what a pass reads through them (BoostReads);
- memory: what the operator keeps of a job's boost between passes;
- writes: what to write on the Workload now, and when to look again;
- condition: the PriorityBoost condition that says which bound or guard applies;
- decide: the boost's part of a pass's plan.

Nothing here writes: reconcile.act carries out what the plan asks.
"""
