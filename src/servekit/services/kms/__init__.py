"""KMS on servekit up's port: symmetric keys kept in the home, aliases, policies, real encryption (docs/kms.md)."""
