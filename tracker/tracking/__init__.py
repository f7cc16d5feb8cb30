"""Tracking reads: every query the API, push and dashboards run against Pinot."""
