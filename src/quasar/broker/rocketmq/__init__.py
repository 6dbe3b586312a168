"""RocketMQ 5 gRPC endpoint (issue 18)."""
