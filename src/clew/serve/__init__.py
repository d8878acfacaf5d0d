"""The service boundary: HTTP API (FastAPI), web UI (Streamlit) and MCP server over one engine.

pydantic lives only here (``dto.py``, ``settings.py``); the engine below stays dataclasses.
"""
