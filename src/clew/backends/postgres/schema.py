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

:func:`bootstrap` is how :class:`~clew.backends.postgres.store.PostgresStore` opens an index: it
checks the extensions, creates the schema if asked, and applies the missing migrations.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from clew.errors import IndexNotFoundError, StoreError

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]

_EXTENSION_LOCK = int.from_bytes(hashlib.blake2b(b"clew:extensions", digest_size=8).digest(), "big")
_EXTENSION_LOCK -= 1 << 63

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
    # 4: a chunk of a paged document (PDF) records the page it starts on (citations: p. 4)
    """
    ALTER TABLE chunks ADD COLUMN page integer;
    """,
    # 5: tombstones, one per distinct metadata (keyed by its hash): the last release that
    # removed a document with it, so a scope's release counts what left it too
    """
    CREATE TABLE removed (
        key text PRIMARY KEY,
        metadata jsonb NOT NULL,
        release bigint NOT NULL
    );
    """,
    # 6: each mention's kind (what that chunk's extraction called the concept, a rank in
    # clew.types.CONCEPT_KINDS), so a scope's concept kinds are its own and a delete lowers a
    # concept's kind to the highest left; older mentions take their concept's kind
    """
    ALTER TABLE mentions ADD COLUMN kind smallint NOT NULL DEFAULT 0;
    UPDATE mentions m SET kind = CASE k.kind WHEN 'identifier' THEN 2 ELSE 1 END
        FROM concepts k WHERE k.concept_id = m.concept_id AND k.kind <> 'phrase';
    DROP INDEX mentions_concept;
    CREATE INDEX mentions_concept ON mentions(concept_id, ordinal) INCLUDE (count, kind);
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


def lock_key(schema: str) -> int:
    """The advisory lock that serializes writes (and migrations) to the index in ``schema``."""
    digest = hashlib.blake2b(f"clew:write:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") - (1 << 63)


def _parse_version(text: str | None) -> tuple[int, ...]:
    out = []
    for part in (text or "").split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
    return tuple(out)


def bootstrap(
    conninfo: str,
    schema: str,
    where: str,
    *,
    create: bool,
    read_only_reason: str | None,
    lock: int,
    scrub: Callable[[BaseException], str],
) -> None:
    """Bring the index in ``schema`` to the current version on its own connection: nothing if
    it is current, else (holding the extension lock and the index's write ``lock``) check the
    extensions and apply the missing migrations, creating the schema if ``create``. ``where``
    names the server in messages; ``scrub`` takes the password out of a database error."""
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL ({where}): {scrub(exc)}; check that the "
            "server is running and the URL (host, port, database, user) is right"
        ) from None
    try:
        with conn:
            if _schema_version(conn, schema) == len(MIGRATIONS):
                return  # current: nothing to lock or change
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_EXTENSION_LOCK,))
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                _migrate(conn, schema, where, create, read_only_reason)
    except StoreError:
        raise
    except psycopg.Error as exc:
        raise StoreError(f"cannot open the index {schema!r} ({where}): {scrub(exc)}") from None


def _schema_version(conn: Conn, schema: str) -> int | None:
    """The schema's migration version (0: schema without tables); None: no such schema."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s), "
        "to_regclass(format('%%I.clew_migrations', %s::text)) IS NOT NULL",
        (schema, schema),
    ).fetchone()
    assert row is not None
    if not row[0]:
        return None
    if not row[1]:
        return 0
    found = conn.execute(
        sql.SQL("SELECT COALESCE(MAX(version), 0) FROM {}.clew_migrations").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return int(found[0]) if found else 0


def _migrate(
    conn: Conn, schema: str, where: str, create: bool, read_only_reason: str | None
) -> None:
    version = _schema_version(conn, schema)
    known = len(MIGRATIONS)
    how = (
        f"create it with PostgresStore(url, schema={schema!r}, create=True) "
        "(the CLI creates it on the first ingest)"
    )
    if version is None and not create:
        raise IndexNotFoundError(f"no clew index in schema {schema!r} ({where}); {how}")
    if version == 0:
        tables = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm')",
            (schema,),
        ).fetchone()
        if tables and tables[0]:
            raise StoreError(
                f"schema {schema!r} ({where}) holds tables but no clew index "
                "(no clew_migrations table); choose another schema"
            )
        if not create:
            raise IndexNotFoundError(f"schema {schema!r} ({where}) holds no clew index yet; {how}")
    current = version or 0
    if current > known:
        raise StoreError(
            f"the index {schema!r} ({where}) is at schema version {current}, newer "
            f"than this clew knows (allowed: up to {known}); upgrade clew"
        )
    if current == known:
        return
    if read_only_reason is not None:
        raise StoreError(
            f"the index {schema!r} ({where}) is at schema version {current} and "
            f"needs migrating to {known}; open it once without read_only"
        )
    _ensure_extensions(conn, where)
    ident = sql.Identifier(schema)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
    conn.execute(sql.SQL("SET LOCAL search_path = {}, public").format(ident))
    conn.execute(
        "CREATE TABLE IF NOT EXISTS clew_migrations (version integer PRIMARY KEY, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for v in range(current, known):
        conn.execute(MIGRATIONS[v])
        conn.execute("INSERT INTO clew_migrations(version) VALUES (%s)", (v + 1,))
        log.info("index %s: applied migration %d", schema, v + 1)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (str(known),),
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('release', '0') ON CONFLICT (key) DO NOTHING"
    )


def _ensure_extensions(conn: Conn, server: str) -> None:
    rows = conn.execute(
        "SELECT name, default_version, installed_version FROM pg_available_extensions "
        "WHERE name = ANY(%s)",
        (list(EXTENSIONS),),
    ).fetchall()
    found = {str(r[0]): (r[1], r[2]) for r in rows}
    for name, where in EXTENSIONS.items():
        need = ".".join(map(str, MIN_VERSIONS.get(name, ())))
        if name not in found:
            raise StoreError(
                f"PostgreSQL extension {name!r} is not available on the server ({server}); "
                f"clew needs {where} (minimum version {need}); install it on the server, "
                f"then run `CREATE EXTENSION {name};` or let clew create it"
            )
        default, installed = found[name]
        version = installed or default
        if _parse_version(version) < MIN_VERSIONS.get(name, ()):
            action = f"ALTER EXTENSION {name} UPDATE;" if installed else "upgrade it"
            raise StoreError(
                f"PostgreSQL extension {name!r} is version {version} on the server "
                f"({server}); clew needs {where} (minimum version {need}): {action}"
            )
        if installed is None:
            try:
                with conn.transaction():
                    conn.execute(
                        sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name))
                    )
            except pg_errors.InsufficientPrivilege:
                raise StoreError(
                    f"cannot create the PostgreSQL extension {name!r} ({server}): "
                    f"permission denied; ask an administrator to run `CREATE EXTENSION "
                    f"{name};` in this database (clew needs {where}, minimum version {need})"
                ) from None
