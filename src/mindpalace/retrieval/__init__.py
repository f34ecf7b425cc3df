"""Retrieval services: keeping vectors in sync with the embedder, hybrid keyword + vector search."""
