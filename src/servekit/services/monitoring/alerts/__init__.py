"""Alerts: the consecutive-windows alarm rule, webhook delivery and the Prometheus exporter of a watch."""
