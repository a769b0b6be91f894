"""client."""
