"""Tags of SageMaker's resources (AddTags / ListTags / DeleteTags, and the ``Tags`` of every Create*)."""
