"""Development and test tooling: pinned Kubernetes binaries and a local kwok control plane.

Not part of the operator: it exists so that every test talks to a real API server.
"""
