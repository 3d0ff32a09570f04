"""Least privilege for a step's storage: the guarded handle, the context a step is given, its IAM policy."""
