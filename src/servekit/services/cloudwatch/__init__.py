"""CloudWatch on ``servekit up``: the endpoint metrics store, metric operations, and alarms."""
