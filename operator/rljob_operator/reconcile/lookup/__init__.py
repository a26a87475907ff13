"""The look for the checkpoint the next attempt resumes from:

- finder: where the next attempt resumes, read in-process or through an inspector pod;
- backoff: a look that fails, retried after a doubling back-off;
- wait: a look through an inspector pod that cannot be scheduled or started.
"""
