"""Effects that must fire at most once across replicas, sans-I/O: a lease with a fencing token
decides who may fire, an idempotency record per effect says what already fired
(``ledger.py``). ``client/effects.py`` runs effects under it; the records live in the
journal's file on one node (``store/effects.py``)."""
