"""The PostgreSQL schema: versioned migrations that mirror the embedded store's tables.

Every clew index lives in its own PostgreSQL schema (``clew`` unless the URL says otherwise), so
one database can hold several indexes and a test can make a fresh one. ``MIGRATIONS[i]`` takes
the schema from version ``i`` to ``i + 1``; the store applies the missing ones in one transaction
under an advisory lock and records each in ``clew_migrations``. Never edit a released migration:
append a new one.

Differences from SQLite, on purpose:

- ``chunks.metadata`` is a copy of the document's metadata (jsonb), so the access filter compiles
  to one predicate over ``chunks`` that every leg uses without a join; ``chunks.created_at`` is
  the document's time (epoch seconds) for time windows and recency.
- ``chunks.tokens`` holds the analyzer's tokens joined by single spaces; the BM25 index
  (pg_search) reads it with a whitespace tokenizer, so both backends score the same terms.
- ``chunks.embedding`` is ``vector`` without a dimension until the first write fixes it (the
  HNSW index needs one): ``dimension_ddl`` gives the statements.
"""

from __future__ import annotations

EXTENSIONS = {
    "vector": "pgvector >= 0.8 (https://github.com/pgvector/pgvector)",
    "pg_search": "ParadeDB pg_search >= 0.21 (https://github.com/paradedb/paradedb), "
    "e.g. the paradedb/paradedb image",
}
"""Extensions clew needs, with where to get them (named in the error when one is missing)."""

MIN_VERSIONS: dict[str, tuple[int, ...]] = {"vector": (0, 8), "pg_search": (0, 21)}
"""The oldest version of each extension clew works with."""

MIGRATIONS: tuple[str, ...] = (
    # 1: the tables
    """
    CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
    CREATE TABLE documents (
        doc_id text PRIMARY KEY,
        title text NOT NULL,
        source text NOT NULL,
        fmt text NOT NULL,
        metadata jsonb NOT NULL,
        doc_hash text NOT NULL,
        text text NOT NULL,
        release bigint NOT NULL
    );
    CREATE TABLE chunks (
        ordinal bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        chunk_id text NOT NULL UNIQUE,
        doc_id text NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
        seq integer NOT NULL,
        text text NOT NULL,
        content_hash text NOT NULL,
        token_count integer NOT NULL,
        heading_path jsonb NOT NULL,
        start_char integer NOT NULL,
        end_char integer NOT NULL,
        tokens text NOT NULL,
        embedding vector NOT NULL,
        metadata jsonb NOT NULL,
        created_at double precision,
        release bigint NOT NULL
    );
    CREATE INDEX chunks_doc ON chunks(doc_id, seq);
    CREATE INDEX chunks_metadata ON chunks USING gin (metadata jsonb_path_ops);
    CREATE TABLE concepts (
        concept_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key text NOT NULL UNIQUE,
        label text NOT NULL,
        kind text NOT NULL
    );
    CREATE TABLE mentions (
        ordinal bigint NOT NULL REFERENCES chunks(ordinal) ON DELETE CASCADE,
        concept_id bigint NOT NULL REFERENCES concepts(concept_id),
        count integer NOT NULL,
        PRIMARY KEY (ordinal, concept_id)
    );
    CREATE INDEX mentions_concept ON mentions(concept_id, ordinal);
    CREATE TABLE concept_aliases (
        concept_id bigint NOT NULL REFERENCES concepts(concept_id) ON DELETE CASCADE,
        surface text NOT NULL,
        PRIMARY KEY (concept_id, surface)
    );
    CREATE TABLE links (
        doc_id text NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
        target text NOT NULL,
        PRIMARY KEY (doc_id, target)
    );
    CREATE TABLE changes (
        release bigint NOT NULL,
        op text NOT NULL,
        doc_id text NOT NULL,
        ordinal bigint NOT NULL
    );
    CREATE INDEX changes_release ON changes(release);
    CREATE TABLE releases (
        release bigint PRIMARY KEY,
        created_at double precision NOT NULL,
        added integer NOT NULL,
        removed integer NOT NULL
    );
    CREATE INDEX chunks_bm25 ON chunks USING bm25 (ordinal, tokens)
        WITH (key_field = 'ordinal',
              text_fields = '{"tokens": {"tokenizer": {"type": "whitespace"}}}');
    """,
    # 2: the engine asks whether any document has a given source (memories) on every open
    """
    CREATE INDEX documents_source ON documents(source);
    """,
    # 3: the graph leg reads (concept → chunk, count) for every mention of its seed and related
    # concepts; with the count in the index that is an index-only scan (about 2x faster)
    """
    DROP INDEX mentions_concept;
    CREATE INDEX mentions_concept ON mentions(concept_id, ordinal) INCLUDE (count);
    """,
)


def dimension_ddl(dim: int) -> list[str]:
    """Fix the embedding dimension (on the first write, while ``chunks`` is empty) and build the
    HNSW index over inner product (clew's vectors are unit length)."""
    if not isinstance(dim, int) or dim < 1 or dim > 16000:
        raise ValueError(f"dim={dim!r} is invalid; allowed: 1..16000")
    return [
        f"ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({dim})",
        "CREATE INDEX chunks_hnsw ON chunks USING hnsw (embedding vector_ip_ops) "
        "WITH (m = 16, ef_construction = 64)",
    ]
