"""What the operator creates for a job, as dicts: the gang's pods and its headless Service
(`pods`), named and labelled by `identity`, started the way `spec.launcher` says (`launchers`:
`torchrun` or `ray`), placed as one gang (`gang`); and the inspector pod that reads a
checkpoint volume the operator cannot (`inspector`)."""
