"""Session lifecycle, ownership, budgets and the per-call path."""
