"""Reconcile: observe the cluster, decide the next step (pure), carry it out (kube).

The pass's skeleton sits here (run, snapshot, pod_facts, plan, decide, act, settings); the
decisions it calls have their rooms: policies/, lookup/ (the look for the checkpoint) and
boost/ (Kueue's priority boost).
"""
