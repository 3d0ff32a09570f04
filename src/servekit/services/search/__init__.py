"""SageMaker Search over the resources the plane keeps."""
