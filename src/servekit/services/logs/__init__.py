"""CloudWatch Logs on ``servekit up``'s port: log groups, streams and events in the state
(``servekit.services.logs.store``),
their operations (:mod:`servekit.services.logs.api`), and the shipper that reads the output files of instances and jobs
into the groups SageMaker names (:mod:`servekit.services.logs.shipper`)."""
