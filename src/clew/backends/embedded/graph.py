"""The graph's derived files in an embedded index: ``graph.json`` and ``graph-<stamp>.npz``.

The graph itself (:class:`clew.index.graph.GraphIndex`: concepts, mentions, PageRank and the
graph leg) is in memory and shared by both backends; this module saves it beside
``clew.sqlite`` and reads it back, through :mod:`clew.backends.embedded.files` (sealed manifest,
checksums, store origin). Arrays go to the ``.npz``, names and maps to the manifest: no pickle,
so loading is safe.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from clew.backends.embedded.files import Origin, Source, load_saved, saving
from clew.index.graph import GraphIndex, kind_ranks

FORMAT = "clew-graph/3"
"""3: each mention's kind (``mention_kind``), so a scope's concept kinds are its own."""


def save_graph(graph: GraphIndex, directory: Path, origin: Origin | None = None) -> None:
    """Arrays to ``graph-<stamp>.npz``, names and maps to the ``graph.json`` manifest, sealed;
    ``origin``: the store release this graph reflects (a load checked against the store
    rejects a manifest without it)."""
    m = graph.mentions
    fields = {
        "keys": graph.keys,
        "labels": graph.labels,
        "kinds": graph.kinds,
        "concept_ids": graph.concept_ids,
        "n_chunks": graph.n_chunks,
        "max_words": graph.max_words,
        "doc_links": graph.doc_links,
        "link_types": graph.link_types,
        "about": [[r, list(d)] for r, d in graph.about.items()],
        "chunk_doc": [[o, d] for o, d in graph.chunk_doc.items()],
        "next_chunk": [[a, b] for a, b in graph.next_chunk.items()],
    }
    with saving(directory, "graph", FORMAT, graph.release, fields, origin) as path:
        np.savez(
            path(".npz"),
            data=m.data,
            indices=m.indices,
            indptr=m.indptr,
            mention_kind=graph.mention_kind,
            shape=np.array(m.shape),
            df=graph.df,
            pr_chunk=graph.pagerank_chunk,
            pr_concept=graph.pagerank_concept,
        )


def load_graph(directory: Path, source: Source | None = None) -> GraphIndex | None:
    """The saved graph, or None when it is missing, torn, damaged, inconsistent or (given
    ``source``) not derived from that store at a release it has (then rebuild); see
    :func:`clew.backends.embedded.files.read_manifest`."""
    return load_saved(
        directory,
        "graph",
        FORMAT,
        _read,
        source=source,
        misfit="its arrays and names do not fit together",
    )


def _read(meta: dict[str, Any], file: Callable[[str], Path]) -> GraphIndex | None:
    with np.load(file(".npz")) as npz:
        arrays = {key: npz[key] for key in npz.files}
    g = GraphIndex()
    g.release = int(meta["release"])
    g.keys, g.labels, g.kinds = list(meta["keys"]), list(meta["labels"]), list(meta["kinds"])
    g.concept_ids = [int(c) for c in meta["concept_ids"]]
    g.key_to_row = {k: i for i, k in enumerate(g.keys)}
    g.n_chunks, g.max_words = int(meta["n_chunks"]), int(meta["max_words"])
    g.doc_links = {str(d): list(t) for d, t in dict(meta["doc_links"]).items()}
    g.link_types = {
        str(a): {str(b): str(r) for b, r in dict(t).items()}
        for a, t in dict(meta["link_types"]).items()
    }
    g.about = {int(r): tuple(str(d) for d in docs) for r, docs in meta["about"]}
    g.chunk_doc = {int(o): d for o, d in meta["chunk_doc"]}
    g.next_chunk = {int(a): int(b) for a, b in meta["next_chunk"]}
    shape = (int(arrays["shape"][0]), int(arrays["shape"][1]))
    g.mentions = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=shape)
    g.mentions.has_canonical_format = True  # saved from a canonical matrix (checksummed)
    g.mention_kind = arrays["mention_kind"].astype(np.int8)
    g.kind_rank = kind_ranks(g.kinds)
    g.mentions_csc = g.mentions.tocsc()
    g.df = arrays["df"]
    g.pagerank_chunk, g.pagerank_concept = arrays["pr_chunk"], arrays["pr_concept"]
    if (
        len(g.keys) != shape[0]
        or len(g.df) != shape[0]
        or len(g.labels) != shape[0]
        or len(g.kinds) != shape[0]
        or len(g.mention_kind) != len(g.mentions.data)
        or len(g.concept_ids) != shape[0]
        or len(g.key_to_row) != shape[0]
        or len(g.pagerank_concept) != shape[0]
        or any(o >= shape[1] for o in g.chunk_doc)
        or any(r >= shape[0] for r in g.about)
    ):
        return None
    return g
