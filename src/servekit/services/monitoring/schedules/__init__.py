"""SageMaker Model Monitor's scheduling API on ``servekit up``: job definitions, schedules and executions of
``servekit monitor`` runs."""
