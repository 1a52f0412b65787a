"""polyvox inside voice-agent frameworks (docs/agents.md).

- `polyvox.plugins.pipecat`: `PolyvoxTTSService`, a Pipecat TTS service
  (`pip install "polyvox[pipecat]"`).
- `polyvox.plugins.livekit`: `PolyvoxTTS`, a LiveKit Agents TTS (`pip install
  "polyvox[livekit]"`).

Both speak the WebSocket protocol of docs/websocket.md (`polyvox.plugins.protocol`): one
socket per conversation, LLM text sent as it comes, audio and word timings yielded as
they arrive, `cancel` on interruption, and a new socket when the server went away.
"""
