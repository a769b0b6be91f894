"""Chain links as processes: TCP between links and devices, configuration in NATS JetStream.

``config`` (the membership record and its pure transitions), ``frames`` (what travels on a
connection, each frame stamped with the configuration epoch), ``config_store`` (JetStream
key-value, compare-and-set), ``node`` (one link process), ``device`` (a device over TCP),
``nats_server`` (a local NATS server from the virtual environment), ``cli``.
"""
