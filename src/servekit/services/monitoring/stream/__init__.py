"""Monitored data as a stream: sources read as Arrow tables, event-time windows and their panes."""
