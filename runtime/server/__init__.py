"""gRPC transport only: proto ↔ domain, errors ↔ status, wiring."""
