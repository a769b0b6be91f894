"""Octoprotocol: devices send events to a chain of replicas; the tail computes; state flows up.

``records`` (the seed's structs), ``link`` (one replica: ingest, bootstrap, state changes,
compute), ``device`` (the device state machine), ``json_tree`` (RFC 7386), ``app`` (loading
``compute``) and ``game`` (the example application). All sans-I/O.
"""
