"""S3 on ``servekit up``'s port: the embedded durable object store (objects as files under ``<home>/s3``)."""
