"""The embedded backend: SQLite as the system of record, derived index files beside it."""
