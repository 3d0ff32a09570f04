"""Where instances run: the ReplicaBackend protocol, local processes (the default) and Ray actors."""
