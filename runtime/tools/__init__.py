"""What runs: tool semantics, talking to sandboxes only through their interface."""
