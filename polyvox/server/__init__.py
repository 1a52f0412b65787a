"""The network face of polyvox: an OpenAI-compatible speech API, a WebSocket for text
streamed in and audio streamed out, voices, metrics and a page to try it (FastAPI +
uvicorn over the AsyncEngine). Start it with `polyvox serve`; see docs/server.md."""
