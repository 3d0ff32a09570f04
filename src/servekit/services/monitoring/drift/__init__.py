"""Data drift statistics (pure): feature types, summaries, drift metrics, profiles, thresholds, verdicts."""
