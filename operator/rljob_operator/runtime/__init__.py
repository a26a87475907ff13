"""The machinery under the reconcile: the work queue, the watch caches, who may act."""
