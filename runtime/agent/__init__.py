"""The in-sandbox agent (stdlib only; runs inside containers, not here)."""
