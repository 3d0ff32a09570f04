"""Pipeline runs in the state: their lifecycles, the run store, SageMaker-shaped views and lineage."""
