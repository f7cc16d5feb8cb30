"""What every process of ours needs to run, below any framework.

Settings from the environment (``conf``), the Kafka clients with their reliability
settings (``kafka``), the readers' reported positions (``positions``), logging with
secrets kept out (``logs``), the Prometheus exposition (``metrics``) and what an
unreachable Redis raises (``stores``). Django, the
outbox relay, the simulator, the push bridge, the Spark driver and the Pinot table
loader share it; it stands on the contract and imports no web or Spark framework.
"""
