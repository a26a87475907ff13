"""What the operator creates for a job: the gang's pods and its headless service, as dicts."""
