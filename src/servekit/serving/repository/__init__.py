"""The model repository: TF Serving's ``<base>/<model>/<version>/`` layout, version policies, polling."""
