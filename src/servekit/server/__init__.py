"""A serving process without its fronts: the core that every protocol front mounts on."""
