"""Yjs documents, sans-I/O: the y-protocols framing (``encoding``, ``messages``), awareness
(``awareness``) and the per-document state machine (``documents``). Documents are pycrdt
``Doc``s: nothing here encodes or merges a Yjs update by hand."""
