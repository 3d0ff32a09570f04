"""Running steps: the scheduler, the run loop, local and Ray engines, the worker, cache keys, actions."""
