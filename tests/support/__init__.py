"""Test support: real servers (hub, redis-server, nginx) and a raw protocol client."""
