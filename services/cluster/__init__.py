"""The cluster: node registry, gang placement, TF_CONFIG, one reconcile pass of the scheduler,
gang outcome and the watchdog. SQL-side except the pure modules (placement, tf_config)."""
