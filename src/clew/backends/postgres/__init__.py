"""The scale-out backend: PostgreSQL with pgvector and BM25 in the database."""
