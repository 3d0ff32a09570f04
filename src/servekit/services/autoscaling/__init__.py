"""Application Auto Scaling for endpoint variants: target tracking, step and scheduled scaling, and the
autoscaler that applies them."""
