"""One frozen configuration record, made of small records, with named presets.

Every tuning lever is a named field. Per-request overrides go through :func:`dataclasses.replace`
or :meth:`EngineConfig.with_overrides`; the same record loads from YAML for the CLI and server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from clew.errors import ConfigError


def _check(cond: bool, name: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{name}={value!r} is invalid; allowed: {allowed}")


@dataclass(frozen=True, slots=True)
class ChunkConfig:
    max_tokens: int = 256
    """Largest chunk, in embedding-tokenizer tokens including the title prefix and specials."""
    overlap_tokens: int = 32
    """Tokens repeated between consecutive windows when one section has to be split."""

    def __post_init__(self) -> None:
        _check(32 <= self.max_tokens <= 8192, "chunk.max_tokens", self.max_tokens, "32..8192")
        _check(
            0 <= self.overlap_tokens < self.max_tokens // 2,
            "chunk.overlap_tokens",
            self.overlap_tokens,
            f"0..{self.max_tokens // 2 - 1} (less than half of max_tokens)",
        )


@dataclass(frozen=True, slots=True)
class LexicalConfig:
    depth: int = 50
    k1: float = 0.9
    b: float = 0.4
    part_weight: float = 1.0
    """Query weight of a compound's parts (``err``, ``4413``) against the whole (``err-4413``).
    1.0 measured best: 0.5 cost SciFact 0.008 nDCG@10 (biomedical terms are compounds)."""

    def __post_init__(self) -> None:
        _check(1 <= self.depth <= 10_000, "lexical.depth", self.depth, "1..10000")
        _check(0.0 <= self.k1 <= 5.0, "lexical.k1", self.k1, "0.0..5.0")
        _check(0.0 <= self.b <= 1.0, "lexical.b", self.b, "0.0..1.0")
        _check(0.0 <= self.part_weight <= 1.0, "lexical.part_weight", self.part_weight, "0.0..1.0")


@dataclass(frozen=True, slots=True)
class DenseConfig:
    depth: int = 50
    hnsw_min_chunks: int = 20_000
    """Below this many chunks the dense leg scans exactly; above it an HNSW index is built."""
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    exact_max_allowed: int = 20_000
    """With HNSW built, a filter that allows at most this many chunks is served by an exact scan
    (no recall loss); a broader filter searches HNSW with the mask inside the walk and a beam
    widened by 1 / allowed share."""
    scoped_exact: bool = True
    """A caller's scope (an API key's, a tenant's) is served by an exact scan of the scope's
    chunks however many it holds, so its dense hits depend on nothing outside the scope (an
    HNSW walk goes through every tenant's vectors, and which of its own it finds depends on
    them). False trades that wall for HNSW speed on scopes above ``exact_max_allowed``."""

    def __post_init__(self) -> None:
        _check(1 <= self.depth <= 10_000, "dense.depth", self.depth, "1..10000")
        _check(self.hnsw_min_chunks >= 1, "dense.hnsw_min_chunks", self.hnsw_min_chunks, ">= 1")
        _check(4 <= self.hnsw_m <= 128, "dense.hnsw_m", self.hnsw_m, "4..128")
        _check(self.ef_construction >= 8, "dense.ef_construction", self.ef_construction, ">= 8")
        _check(self.ef_search >= 8, "dense.ef_search", self.ef_search, ">= 8")
        _check(
            self.exact_max_allowed >= 0, "dense.exact_max_allowed", self.exact_max_allowed, ">= 0"
        )


@dataclass(frozen=True, slots=True)
class GraphConfig:
    depth: int = 50
    max_hops: int = 2
    """Hops from a query concept: 1 = chunks that mention it; 2 = also via RELATED_TO concepts."""
    hop_penalty: float = 0.3
    """Score multiplier per extra hop (a 2-hop chunk scores at most hop_penalty of a 1-hop one)."""
    pagerank_weight: float = 0.2
    related_per_concept: int = 20
    """RELATED_TO neighbours kept per concept (strongest co-occurrence first)."""
    related_weighting: str = "count"
    """How RELATED_TO concepts are ranked: ``count`` (co-occurrence with the seeds' chunks) or
    ``pmi`` (positive pointwise mutual information: co-occurrence over what the concept's
    frequency alone would give). Measured on the train/dev sets (default preset, ``clew eval
    --config``), PMI moved nothing beyond noise (SciFact train nDCG@10 0.7293 = 0.7293, NFCorpus
    dev 0.3250 → 0.3253, support 0.7969 → 0.7965, memory R@10 0.866 = 0.866, MuSiQue-train100
    R@5 0.694 → 0.689), so ``count`` stays the default."""
    hub_fraction: float = 0.05
    """Concepts mentioned in more than this share of chunks are hubs: no RELATED_TO edges."""
    fuzzy: bool = True
    """Link query words to concepts one edit away (never identifiers)."""
    word_weight: float = 1.0
    """Weight of a plain one-word phrase concept (a common noun) against identifiers, named
    entities and multi-word phrases; 0 = never link them."""
    method: str = "auto"
    """``ppr`` (Personalized PageRank over chunks and concepts, seeded by the linked concepts
    and the top lexical + dense passages; :mod:`clew.index.ppr`), ``walk`` (hop 1 and 2 from
    the linked concepts, in parallel with the other legs; the ``rules`` preset) or ``auto``
    (the router's plan: PPR for a question that names an entity or identifier, where it pays
    for running after the text legs; the walk otherwise)."""
    damping: float = 0.8
    """PPR: probability that the walk goes on at each step (it restarts at a seed otherwise)."""
    ppr_iterations: int = 12
    ppr_epsilon: float = 1e-4
    """PPR: a node moves its mass on only while it holds more than this (of a total of 1)."""
    seed_passages: int = 10
    """PPR: how many top passages of the lexical + dense fusion seed the walk (0: none)."""
    passage_share: float = 0.7
    """PPR: the share of the restart mass on seed passages when concepts seed it too."""
    next_share: float = 0.1
    """PPR: probability that a walk leaving a chunk takes a NEXT / LINKS_TO edge, if it has one."""
    stop_fraction: float = 0.2
    """PPR: a concept mentioned by more than this share of the chunks (and by more than 20) is a
    stop-concept: it seeds nothing, however the query names it."""
    ppr_keep_restart: bool = False
    """PPR: whether a seed passage's score keeps the mass of the walk's first restart there.
    False: every chunk scores by the mass the walk brings it over edges, so the leg tells how
    connected a chunk is to the query's concepts and its other top passages (the lexical and
    dense legs already said how well it matches)."""
    title_links: int = 1
    """Title links (:mod:`clew.retrieve.titles`): how many documents each source hit names by
    their title join the hits at ``title_rank``; 0 = off. They run with the graph leg."""
    title_sources: int = 1
    """Title links: how many of the top hits are read for titles they name."""
    title_rank: int = 3
    """Title links: the rank at which the named documents join (the hits ahead stay)."""
    title_shown: int = 0
    """Title links: a named document already among the top ``title_shown`` hits is not brought
    (it is shown already), so the source's next named document is; 0 = only the hits ahead of
    ``title_rank`` are passed over (the default). Measured, not made the default (``clew eval
    --config`` with ``graph.title_shown`` 4, 5, 6, 10): at 6, hotpotqa-train100 R@5 0.905 ->
    0.925 and musique-train100 0.7125 -> 0.7142, SciFact train, NFCorpus dev, support and
    memory unchanged, 10 loses on both multi-hop sets; but reported on the test splits,
    MuSiQue-200 R@5 0.6308 -> 0.6183 (HotpotQA-200 0.890 -> 0.8925), so the gain does not carry."""

    def __post_init__(self) -> None:
        _check(1 <= self.depth <= 10_000, "graph.depth", self.depth, "1..10000")
        _check(0 <= self.title_links <= 10, "graph.title_links", self.title_links, "0..10")
        _check(0 <= self.title_sources <= 10, "graph.title_sources", self.title_sources, "0..10")
        _check(
            self.title_sources < self.title_rank <= 100,
            "graph.title_rank",
            self.title_rank,
            f"{self.title_sources + 1}..100 (after the title_sources hits read)",
        )
        _check(0 <= self.title_shown <= 100, "graph.title_shown", self.title_shown, "0..100")
        _check(
            self.method in ("auto", "ppr", "walk"), "graph.method", self.method, "auto, ppr, walk"
        )
        _check(0.0 < self.damping < 1.0, "graph.damping", self.damping, "(0, 1)")
        _check(
            1 <= self.ppr_iterations <= 100,
            "graph.ppr_iterations",
            self.ppr_iterations,
            "1..100",
        )
        _check(0.0 < self.ppr_epsilon < 1.0, "graph.ppr_epsilon", self.ppr_epsilon, "(0, 1)")
        _check(0 <= self.seed_passages <= 100, "graph.seed_passages", self.seed_passages, "0..100")
        _check(
            0.0 <= self.passage_share <= 1.0,
            "graph.passage_share",
            self.passage_share,
            "0.0..1.0",
        )
        _check(0.0 <= self.next_share <= 1.0, "graph.next_share", self.next_share, "0.0..1.0")
        _check(0.0 < self.stop_fraction <= 1.0, "graph.stop_fraction", self.stop_fraction, "(0, 1]")
        _check(self.max_hops in (1, 2), "graph.max_hops", self.max_hops, "1 or 2")
        _check(
            self.related_weighting in ("count", "pmi"),
            "graph.related_weighting",
            self.related_weighting,
            "count, pmi",
        )
        _check(0.0 < self.hop_penalty <= 1.0, "graph.hop_penalty", self.hop_penalty, "(0, 1]")
        _check(
            0.0 <= self.pagerank_weight <= 10.0,
            "graph.pagerank_weight",
            self.pagerank_weight,
            "0.0..10.0",
        )
        _check(
            1 <= self.related_per_concept <= 1000,
            "graph.related_per_concept",
            self.related_per_concept,
            "1..1000",
        )
        _check(0.0 < self.hub_fraction <= 1.0, "graph.hub_fraction", self.hub_fraction, "(0, 1]")
        _check(0.0 <= self.word_weight <= 1.0, "graph.word_weight", self.word_weight, "0.0..1.0")


@dataclass(frozen=True, slots=True)
class FusionConfig:
    method: str = "convex"
    """``convex`` (weighted sum of each leg's min-max normalized scores) or ``rrf`` (weighted
    Reciprocal Rank Fusion); see :mod:`clew.retrieve.fuse`."""
    rrf_k: int = 60
    lexical_weight: float = 1.0
    dense_weight: float = 1.0
    graph_weight: float = 0.15
    dedup: bool = True
    """Fold hits with the same content hash into one (the best-ranked keeps its id)."""
    title_identifier: float = 0.25
    """After fusion, a hit whose document title or section heading names an identifier the
    query names (``SW-2207``, ``ERR-4413``) gains this many rank-1 leg parts, times the
    identifiers' share of the query's idf mass (:mod:`clew.retrieve.named`); 0 = off."""

    def __post_init__(self) -> None:
        _check(self.method in ("convex", "rrf"), "fusion.method", self.method, "convex, rrf")
        _check(
            0.0 <= self.title_identifier <= 10.0,
            "fusion.title_identifier",
            self.title_identifier,
            "0.0..10.0",
        )
        _check(self.rrf_k >= 0, "fusion.rrf_k", self.rrf_k, ">= 0")
        for name in ("lexical_weight", "dense_weight", "graph_weight"):
            value = getattr(self, name)
            _check(0.0 <= value <= 100.0, f"fusion.{name}", value, "0.0..100.0")
        _check(
            self.lexical_weight + self.dense_weight + self.graph_weight > 0,
            "fusion weights",
            (self.lexical_weight, self.dense_weight, self.graph_weight),
            "at least one leg with weight > 0",
        )

    def top_part(self) -> float:
        """What a rank-1 hit of a leg of weight 1 adds to a fused score under ``method``: the
        unit recency boosts and the abstention evidence are scaled by."""
        return 1.0 / (self.rrf_k + 1) if self.method == "rrf" else 1.0

    def weights(self) -> dict[str, float]:
        return {
            "lexical": self.lexical_weight,
            "dense": self.dense_weight,
            "graph": self.graph_weight,
        }


@dataclass(frozen=True, slots=True)
class RouterConfig:
    enabled: bool = True
    identifier_lexical_boost: float = 1.5
    identifier_dense_factor: float = 0.7
    relation_graph_weight: float = 0.3
    """Graph weight of a query with a relation cue and a linked concept (convex scale: a leg's
    top hit adds its weight; lexical + dense weigh 2 together)."""
    question_graph_weight: float = 0.15
    """Graph weight of a question naming a concept (0.15 = the base weight: no boost; the
    rules-only preset, on the RRF scale, uses 0.3)."""
    quoted_lexical_boost: float = 1.3
    global_graph_weight: float = 0.3
    named_graph_weight: float = 2.0
    """Graph weight of a question that names an entity or an identifier the graph knows (a
    name seeds the walk well; a common noun does not; a statement, such as a claim to check,
    is answered by the passages that match it, not by their neighbours)."""
    relation_expand: bool = True
    """A relation cue ("what else", "caused by", "after") with a linked concept turns graph
    expansion on for that query, even when ``expand.enabled`` is off."""
    adaptive: bool = True
    """After the legs ran, the learned router model splits the lexical + dense weight per query
    from the legs' own lists (score shapes, idf cover, agreement) and the query features; the
    identifier and quoted rules then no longer scale those two legs (the model has both)."""
    model: str = ""
    """Router model file from ``clew train-router``; "" = the one shipped with clew."""
    lexical_floor: float = 0.0
    """With the router model: a lexical list whose top hit scores less than this share of the
    most any chunk could score on the query (its ``lexical_cover``) weighs that share over this
    floor times what the model gave it (0 = off). "temporarily stop billing someone without
    ending their plan" matches a chunk on "plan" alone, and its ten confident-looking hits
    should not count as a rank list. Measured and left off (``make eval`` with 0.2): support
    dev nDCG@10 0.811 -> 0.815 (paraphrase slice 0.565 -> 0.578), but memory dev 0.690 -> 0.684
    (multi-hop slice 0.720 -> 0.701, Recall@10 unchanged); SciFact train -0.0002, NFCorpus dev
    -0.0006, musique/hotpotqa-train100 unchanged; reported on test, SciFact 0.7212 -> 0.7201.
    A floor of 0.3 gained support more (0.822) and lost memory's temporal slice 0.03."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name not in ("enabled", "relation_expand", "adaptive", "model", "lexical_floor"):
                value = getattr(self, f.name)
                _check(0.0 <= value <= 10.0, f"router.{f.name}", value, "0.0..10.0")
        _check(
            0.0 <= self.lexical_floor <= 1.0,
            "router.lexical_floor",
            self.lexical_floor,
            "0.0..1.0 (a share of the query's BM25 ceiling; 0 = off)",
        )


@dataclass(frozen=True, slots=True)
class SearchConfig:
    k: int = 10
    max_query_chars: int = 2_000

    def __post_init__(self) -> None:
        _check(1 <= self.k <= 1_000, "search.k", self.k, "1..1000")
        _check(
            1 <= self.max_query_chars <= 100_000,
            "search.max_query_chars",
            self.max_query_chars,
            "1..100000",
        )


@dataclass(frozen=True, slots=True)
class AssembleConfig:
    token_budget: int = 3_200
    jaccard: float = 0.85
    """Skip a hit whose token set overlaps an already kept one by more than this."""
    floor: float = 0.5
    """Stop at hits scoring below this share of the top score."""

    def __post_init__(self) -> None:
        _check(
            1 <= self.token_budget <= 1_000_000,
            "assemble.token_budget",
            self.token_budget,
            "1..1000000",
        )
        _check(0.0 < self.jaccard <= 1.0, "assemble.jaccard", self.jaccard, "(0, 1]")
        _check(0.0 <= self.floor <= 1.0, "assemble.floor", self.floor, "0.0..1.0")


@dataclass(frozen=True, slots=True)
class ExpandConfig:
    """Graph expansion from the top fused seeds (after fusion, before reranking)."""

    enabled: bool = False
    seeds: int = 10
    """Top fused hits the walk starts from (and the frontier size of the second hop)."""
    max_hops: int = 2
    """Chunk-to-chunk steps from a seed: 1 or 2, never unbounded."""
    hop_penalty: float = 0.1
    """Score multiplier per hop: a chunk at h hops scores at most seed × hop_penalty**h. 0.1
    suits convex fusion, whose scores spread over [0, sum of weights]: at 0.5 an expanded
    chunk lands in the top 10 and costs nDCG@10 (bench/results/expand.md, train and dev sets);
    RRF's scores are compressed (the ``rules`` preset keeps 0.5)."""
    max_nodes: int = 200
    """Most chunks expansion may add or lift."""
    max_concept_chunks: int = 100
    """A concept more allowed chunks mention than this is too common to link through."""
    mention_weight: float = 1.0
    """Edge weight of a shared concept (× its idf share over the allowed chunks)."""
    next_weight: float = 1.0
    """Edge weight of the adjacent chunk of the same document."""
    link_weight: float = 1.0
    """Edge weight of a chunk of a linked (or linking) document; later chunks get half."""

    def __post_init__(self) -> None:
        _check(1 <= self.seeds <= 1_000, "expand.seeds", self.seeds, "1..1000")
        _check(self.max_hops in (1, 2), "expand.max_hops", self.max_hops, "1 or 2")
        _check(0.0 < self.hop_penalty < 1.0, "expand.hop_penalty", self.hop_penalty, "(0, 1)")
        _check(1 <= self.max_nodes <= 10_000, "expand.max_nodes", self.max_nodes, "1..10000")
        _check(
            2 <= self.max_concept_chunks <= 1_000_000,
            "expand.max_concept_chunks",
            self.max_concept_chunks,
            "2..1000000",
        )
        for name in ("mention_weight", "next_weight", "link_weight"):
            value = getattr(self, name)
            _check(0.0 <= value <= 1.0, f"expand.{name}", value, "0.0..1.0")


RERANKERS = ("none", "features", "cross-encoder", "llm")


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """Which reranker runs on the top of the pool, and how much of it."""

    kind: str = "none"
    """``none``, ``features`` (explainable, no LLM), ``cross-encoder`` or ``llm`` (grader)."""
    model: str = ""
    """cross-encoder: a model directory or cached hub name; features: a weights file from
    ``clew train-reranker --kind features`` ("" = the weights clew ships, trained across six
    train/dev sets; ``blend`` = the untrained blend); llm: the model name."""
    pool: int = 40
    """Candidates the reranker scores (the top of the fused, expanded list)."""
    keep: int = 8
    """Reranked candidates placed first; the rest of the pool follows in fused order."""
    batch_size: int = 16
    max_length: int = 0
    """Cross-encoder truncation in tokens; 0 = the model's own limit."""
    base_url: str = ""
    """llm: an OpenAI-compatible endpoint (the key comes from CLEW_LLM_API_KEY, never config)."""
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        _check(self.kind in RERANKERS, "rerank.kind", self.kind, ", ".join(RERANKERS))
        _check(1 <= self.pool <= 1_000, "rerank.pool", self.pool, "1..1000")
        _check(1 <= self.keep <= self.pool, "rerank.keep", self.keep, f"1..pool ({self.pool})")
        _check(1 <= self.batch_size <= 1_024, "rerank.batch_size", self.batch_size, "1..1024")
        _check(0 <= self.max_length <= 8_192, "rerank.max_length", self.max_length, "0..8192")
        _check(0.0 < self.timeout_s <= 600.0, "rerank.timeout_s", self.timeout_s, "(0, 600]")
        if self.kind == "cross-encoder":
            _check(bool(self.model), "rerank.model", self.model, "a model directory or name")


ANSWER_MODES = ("extractive", "generative")


@dataclass(frozen=True, slots=True)
class AnswerConfig:
    mode: str = "extractive"
    """``extractive`` (no LLM, deterministic) or ``generative`` (OpenAI-compatible endpoint)."""
    max_sentences: int = 4
    """Most sentences in an extractive answer (the word budget usually binds first; short
    sentences, as chat turns have, leave room for a fourth)."""
    max_words: int = 60
    """Longest extractive answer in words: the best sentence always, then supporting sentences
    while the answer stays within this (a second sentence that bridges to a second hop may take
    it to 1.25 times this)."""
    chunks: int = 4
    """Best-ranked hits whose sentences compete for the extractive answer."""
    embed_sentences: int = 8
    """Sentences embedded to score by meaning, the best by terms, type and rank (0: all)."""
    abstain: bool = True
    """Answer "not in the indexed sources" when the evidence does not clear the calibrated bar."""
    calibration: str = ""
    """Abstention calibration file from ``clew calibrate``; "" = the index's own for the
    caller's scope (``clew calibrate --self [--scope JSON]``) or else the one shipped with clew."""
    self_calibrate: int = 20
    """After an ingest into a scope (or the whole index) holding at least this many chunks, its
    own threshold is measured as ``clew calibrate --self [--scope]`` does, when it has none yet
    or has grown or shrunk by half since (0: never; a calibration a user wrote is never
    replaced). Only with ``calibration: ""``."""
    base_url: str = ""
    model: str = ""
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        _check(
            0 <= self.self_calibrate <= 1_000_000_000,
            "answer.self_calibrate",
            self.self_calibrate,
            "0..1000000000 chunks (0: never)",
        )
        _check(self.mode in ANSWER_MODES, "answer.mode", self.mode, ", ".join(ANSWER_MODES))
        _check(1 <= self.max_sentences <= 20, "answer.max_sentences", self.max_sentences, "1..20")
        _check(1 <= self.chunks <= 20, "answer.chunks", self.chunks, "1..20")
        _check(
            0 <= self.embed_sentences <= 1000,
            "answer.embed_sentences",
            self.embed_sentences,
            "0..1000 (0: all)",
        )
        _check(10 <= self.max_words <= 2000, "answer.max_words", self.max_words, "10..2000")
        _check(0.0 < self.timeout_s <= 600.0, "answer.timeout_s", self.timeout_s, "(0, 600]")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    enabled: bool = True
    """Write a trace of every search and ask into the index directory (``clew replay``)."""
    keep: int = 1_000
    """Newest traces kept; older ones are pruned."""

    def __post_init__(self) -> None:
        _check(1 <= self.keep <= 1_000_000, "trace.keep", self.keep, "1..1000000")


@dataclass(frozen=True, slots=True)
class RecencyConfig:
    """Recency weighting, applied to fused scores after fusion (its own contribution).

    A hit created ``age`` days before the reference time (now, or ``as_of``) gains
    ``weight * 0.5 ** (age / half_life_days) / (rrf_k + 1)``: a brand-new hit ``weight`` times
    what a rank-1 leg adds, an old one almost nothing (age boosts, it never buries an exact
    match). Hits without ``created_at`` are left alone. Off for documents, on for memories."""

    documents: bool = False
    memories: bool = True
    half_life_days: float = 30.0
    weight: float = 0.5
    """Boost of a brand-new hit, as a share of one rank-1 leg's fused part (0 = off)."""

    def __post_init__(self) -> None:
        _check(
            0.0 < self.half_life_days <= 36_500.0,
            "recency.half_life_days",
            self.half_life_days,
            "(0, 36500]",
        )
        _check(0.0 <= self.weight <= 10.0, "recency.weight", self.weight, "[0, 10]")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Result cache of search/ask/recall, keyed by the normalized query, config (so route),
    filter, scope, time constraints, index release, analyzer and model versions."""

    size: int = 512
    """Results kept per scope (least recently used go first); 0 turns the cache off."""
    scopes: int = 16
    """Scopes that keep a partition of their own (the unscoped caller counts as one): a
    scope's entries are evicted by its own queries only while at most this many scopes are
    cached; past that the least recently used scope's partition goes whole."""

    def __post_init__(self) -> None:
        _check(0 <= self.size <= 1_000_000, "cache.size", self.size, "0..1000000")
        _check(1 <= self.scopes <= 10_000, "cache.scopes", self.scopes, "1..10000")


@dataclass(frozen=True, slots=True)
class EmbedderConfig:
    model: str = "minilm"
    """``minilm`` (all-MiniLM-L6-v2: the fp32 export with ``clew[torch]`` installed, the packaged
    int8 ONNX file without), ``minilm-fp32`` or ``minilm-int8`` (pinned), a local directory, or a
    hub name already cached."""
    batch_size: int = 32
    threads: int = 0
    """onnxruntime intra-op threads; 0 = one per core."""

    def __post_init__(self) -> None:
        _check(bool(self.model.strip()), "embedder.model", self.model, "a non-empty name or path")
        _check(1 <= self.batch_size <= 1024, "embedder.batch_size", self.batch_size, "1..1024")
        _check(0 <= self.threads <= 256, "embedder.threads", self.threads, "0..256")


@dataclass(frozen=True, slots=True)
class ConceptConfig:
    spacy: bool = True
    """Named entities and noun phrases from the packaged spaCy pipeline (identifiers always)."""
    max_phrase_words: int = 4

    def __post_init__(self) -> None:
        _check(
            1 <= self.max_phrase_words <= 8,
            "concepts.max_phrase_words",
            self.max_phrase_words,
            "1..8",
        )


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """Hard bounds on what one ingested file may cost, so untrusted input stays bounded.

    A file over ``max_file_bytes`` and a document that makes more than ``max_chunks_per_doc``
    chunks are refused with a :class:`~clew.errors.LoadError` naming the limit (never
    truncated); no chunk is longer than ``max_chunk_chars`` (a run without whitespace is cut
    there); a document's concept extraction past ``concept_budget_s`` seconds of spaCy gives
    its remaining chunks identifiers only (logged)."""

    max_file_bytes: int = 50 * 1024 * 1024
    """Largest file read (50 MiB): the loader never reads more than this many bytes."""
    max_chunk_chars: int = 32_768
    """Longest chunk in characters (far above any 8192-token chunk of prose)."""
    max_chunks_per_doc: int = 10_000
    """Most chunks one document may make (about 10 MB of prose at 256 tokens a chunk)."""
    concept_budget_s: float = 300.0
    """Seconds of spaCy per document; the chunks after it get regex identifiers only. Prose
    takes about 25 ms a chunk on the 2-core reference machine, so a document within
    ``max_chunks_per_doc`` stays under it; an adversarial one (a token per character) not."""

    def __post_init__(self) -> None:
        _check(
            1024 <= self.max_file_bytes <= 1 << 40,
            "ingest.max_file_bytes",
            self.max_file_bytes,
            "1024..1099511627776 (1 KiB..1 TiB)",
        )
        _check(
            256 <= self.max_chunk_chars <= 1_000_000,
            "ingest.max_chunk_chars",
            self.max_chunk_chars,
            "256..1000000",
        )
        _check(
            1 <= self.max_chunks_per_doc <= 100_000_000,
            "ingest.max_chunks_per_doc",
            self.max_chunks_per_doc,
            "1..100000000",
        )
        _check(
            0.0 < self.concept_budget_s <= 86_400.0,
            "ingest.concept_budget_s",
            self.concept_budget_s,
            "(0, 86400] seconds",
        )


@dataclass(frozen=True, slots=True)
class EngineConfig:
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    concepts: ConceptConfig = field(default_factory=ConceptConfig)
    ingest: IngestLimits = field(default_factory=IngestLimits)
    lexical: LexicalConfig = field(default_factory=LexicalConfig)
    dense: DenseConfig = field(default_factory=DenseConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    assemble: AssembleConfig = field(default_factory=AssembleConfig)
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    recency: RecencyConfig = field(default_factory=RecencyConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: EngineConfig | None = None) -> EngineConfig:
        """Build from a nested mapping; unknown sections or fields are errors."""
        merged: EngineConfig = _merge(base or cls(), data, "")
        return merged

    @classmethod
    def from_yaml(cls, path: str | Path) -> EngineConfig:
        import yaml

        try:
            data = load_yaml(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config file {str(path)!r}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping, got {type(data)}")
        preset = data.pop("preset", "default")
        return cls.from_dict(data, base=preset_config(str(preset)))

    def with_overrides(self, **sections: dict[str, Any]) -> EngineConfig:
        merged: EngineConfig = _merge(self, sections, "")
        return merged


_FLOAT = (
    r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"
    r"|^[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?$"
)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that also reads ``1e-5`` and ``3E+4`` as floats, as YAML 1.2 does
    (PyYAML's 1.1 rules want a dot, so ``ppr_epsilon: 1e-5`` would be the string '1e-5')."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(_FLOAT), list("-+0123456789.")
    )
    return yaml.load(text, Loader=Loader)


def _merge(obj: Any, data: dict[str, Any], prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'} must be a mapping, got {data!r}")
    names = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(
                f"unknown config field {prefix + key!r}; allowed: {', '.join(sorted(names))}"
            )
        current = getattr(obj, key)
        if is_dataclass(current):
            changes[key] = _merge(current, value, f"{prefix}{key}.")
        else:
            expected = type(current)
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"{prefix}{key}={value!r} has type {type(value).__name__}; "
                    f"allowed: {expected.__name__}"
                )
            changes[key] = value
    return dataclasses.replace(obj, **changes)


def _preset(**sections: dict[str, Any]) -> EngineConfig:
    return EngineConfig().with_overrides(**sections)


PRESETS: dict[str, EngineConfig] = {
    "default": EngineConfig(),
    "hybrid": _preset(
        fusion={"method": "rrf", "graph_weight": 0.0, "title_identifier": 0.0},
        router={"enabled": False},
    ),
    "lexical": _preset(
        fusion={
            "lexical_weight": 1.0,
            "dense_weight": 0.0,
            "graph_weight": 0.0,
            "title_identifier": 0.0,
        },
        router={"enabled": False},
    ),
    "dense": _preset(
        fusion={
            "lexical_weight": 0.0,
            "dense_weight": 1.0,
            "graph_weight": 0.0,
            "title_identifier": 0.0,
        },
        router={"enabled": False},
    ),
    "graph": _preset(
        fusion={
            "lexical_weight": 0.0,
            "dense_weight": 0.0,
            "graph_weight": 1.0,
            "title_identifier": 0.0,
        },
        router={"enabled": False},
    ),
    "fixed": _preset(router={"enabled": False}),
    "rules": _preset(
        fusion={"method": "rrf", "title_identifier": 0.0},
        expand={"hop_penalty": 0.5},
        graph={"method": "walk"},
        router={
            "adaptive": False,
            "named_graph_weight": 0.0,
            "relation_graph_weight": 1.0,
            "question_graph_weight": 0.3,
            "global_graph_weight": 0.8,
        },
    ),
}
"""Named presets. ``default``: convex fusion, routed per query (rules for the graph leg, the
learned router for lexical against dense). ``rules``: the previous default (RRF, the query-
feature rules alone). ``hybrid``: plain RRF of lexical and dense (the usual baseline). The
single-leg presets fix the leg weights. The baselines (``hybrid``, ``rules`` and the single
legs) leave out the identifier-title step."""


def preset_config(name: str) -> EngineConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown preset {name!r}; allowed: {', '.join(sorted(PRESETS))}"
        ) from None
