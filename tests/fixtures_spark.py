"""Spark fixtures (session-scoped SparkSession, streaming job runner)."""
