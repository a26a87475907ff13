"""The FSDP2 backend: its trainer and its checkpoint format."""
