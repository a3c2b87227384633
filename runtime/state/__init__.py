"""The daemon's durable state: one SQLite database under `state_dir`."""
