"""``reasonwire gateway``: AG-UI over HTTP + SSE in front of the normalized topics (docs/gateway.md)."""
