"""CloudWatch Logs on ``servekit up``'s port: log groups, streams and events in the state (``servekit.state.logs``),
their operations (:mod:`servekit.logs.api`), and the shipper that reads the output files of instances and jobs into
the groups SageMaker names (:mod:`servekit.logs.shipper`)."""
