"""pipeline jobs."""
