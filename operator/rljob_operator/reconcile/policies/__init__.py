"""The decisions a reconcile pass calls (reconcile.decide), one policy a module:

- failure: an attempt's end, the budgets and the back-off;
- startup: the resume target and the new gang;
- recovery: the record of each new gang;
- suspicion: a checkpoint the trainer crashed on;
- under_way: an attempt under way (its phase, its first running pod, its first finished step,
  the early warning of a node going away);
- stuck: pods that cannot be placed or started;
- finish: success, suspension, TTL;
- pod_cleanup: how deletions meet the pods;
- save_on_notice: whether a job that rljob's bridge saves can be saved on notice;
- goodput: where the job's wall time went.
"""
