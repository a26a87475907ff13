"""Reconcile: observe the cluster, decide the next step (pure), carry it out (kube)."""
