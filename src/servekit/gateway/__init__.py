"""The runtime gateway of ``servekit up``: InvokeEndpoint routed to a variant and an instance, multi-model
placement, shadow copies, and the routing table published to gateway replicas."""
