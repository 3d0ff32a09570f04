"""What a pipeline is: references, conditions, steps, the DAG, the DSL and definitions loaded from files."""
