"""Sandboxes as hardened Docker containers: the backend (backend.py), the
attach stream to each container's agent (attach.py), every translation
of a Docker error into toolrt's (errors.py), and the Docker SDK's private
parts it relies on (sdk.py)."""
