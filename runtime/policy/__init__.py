"""Pure policy logic, below the config that names it: path allowlists
(`allowlist.py`), network host patterns and ceilings (`hosts.py`), IP
literals and the ranges never dialled (`addresses.py`)."""
