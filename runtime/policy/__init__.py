"""Pure policy logic: path allowlists."""
