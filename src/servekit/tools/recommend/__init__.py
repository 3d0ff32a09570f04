"""``servekit recommend``: which instance type, how many instances, which batching setting, and what 1,000
inferences cost, answered by measuring real instances inside each type's envelope (see ``sizing`` for the rules)."""
