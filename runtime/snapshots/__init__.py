"""Snapshots, forks and restores of sessions' workspaces (DESIGN "Snapshots and forks")."""
