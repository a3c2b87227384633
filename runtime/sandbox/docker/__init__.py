"""Sandboxes as hardened Docker containers: the backend (backend.py), the
attach stream to each container's agent (attach.py), and every translation
of a Docker error into toolrt's (errors.py)."""
