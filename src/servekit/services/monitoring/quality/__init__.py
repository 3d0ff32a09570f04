"""Model quality: labels joined to captured predictions, quality metrics, baselines, runs, outputs."""
