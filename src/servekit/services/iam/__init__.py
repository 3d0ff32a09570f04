"""IAM on servekit up's port: roles, their inline and attached managed policies (docs/iam.md)."""
