"""Where code runs: containers and the agent inside them (not what runs)."""
