"""State plane: snapshots, deltas, handshake, permissions, mirrors."""
