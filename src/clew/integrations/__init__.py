"""clew as the retriever of other frameworks: one module per framework, each imported only on
purpose (``import clew`` never imports them, nor the frameworks).

- :mod:`clew.integrations.langchain`: ``ClewRetriever``, a LangChain ``BaseRetriever``
  (``pip install 'clew[langchain]'``)
- :mod:`clew.integrations.llamaindex`: ``ClewRetriever``, a LlamaIndex ``BaseRetriever``
  (``pip install 'clew[llamaindex]'``)
- :mod:`clew.integrations.haystack`: ``ClewRetriever``, a Haystack component
  (``pip install 'clew[haystack]'``)
- :mod:`clew.integrations.common`: what they share and need no framework for: a hit as
  plain-JSON metadata (:func:`~clew.integrations.common.hit_metadata`) and the building blocks
  of the filter translators.

Every adapter wraps one :class:`clew.Engine`, passes its ``filter`` (a metadata filter) and
``scope`` (the caller's access filter, fixed at construction, AND-ed into every leg by the engine
so no per-call filter can widen it) through to :meth:`clew.Engine.search`, and returns the
framework's document type in clew's order, with clew's chunk ids and the hit's full provenance.
See ``docs/integrations.md``.
"""
