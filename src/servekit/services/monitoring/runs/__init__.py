"""A drift run: windows judged against the baseline, its outputs and report, the CLI's job, the watch loop."""
