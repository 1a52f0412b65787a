"""Audio formats for the wire: float chunks in, encoded bytes out, as the audio streams.

    pcm    16-bit signed little-endian mono, no header
    wav    a WAV header with unknown (maximal) sizes, then 16-bit PCM: playable as it streams
    mp3    MPEG layer III (LAME through libsndfile), constant bit rate
    opus   Ogg Opus (libopus through libsndfile), 100 ms pages
    flac   FLAC (libFLAC through libsndfile), sent whole when the audio ends: its header
           carries the length, which readers such as libsndfile need

Every encoder resamples first when the client asked for another rate than the model's.
"""

from __future__ import annotations

import functools
import logging
import struct
from dataclasses import dataclass

import numpy as np
import soundfile

from polyvox.audio.wav import to_pcm16
from polyvox.server.resample import StreamingResampler

log = logging.getLogger(__name__)

OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
OPENAI_PCM_RATE = 24000  # OpenAI's `pcm` is 24 kHz; clients play it at that rate
MIN_RATE, MAX_RATE = 8000, 48000


@dataclass(frozen=True)
class FormatSpec:
    name: str
    media_type: str
    soundfile_format: tuple[str, str] | None  # (major, subtype) when libsndfile encodes it
    is_progressive: bool = True  # bytes go out as the audio is made


FORMATS = {
    "pcm": FormatSpec("pcm", "audio/pcm", None),
    "wav": FormatSpec("wav", "audio/wav", None),
    "mp3": FormatSpec("mp3", "audio/mpeg", ("MP3", "MPEG_LAYER_III")),
    "opus": FormatSpec("opus", "audio/ogg", ("OGG", "OPUS")),
    "flac": FormatSpec("flac", "audio/flac", ("FLAC", "PCM_16"), is_progressive=False),
}


@functools.cache
def available_formats() -> tuple[str, ...]:
    """The formats this machine's libsndfile can write (pcm and wav always). Asked once:
    libsndfile lists its formats slowly, and every request checks its format (a third
    of the event loop's time at 100 requests a second, when asked per request)."""
    names = []
    for spec in FORMATS.values():
        if spec.soundfile_format is not None:
            major, subtype = spec.soundfile_format
            if subtype not in soundfile.available_subtypes(major):
                continue
        names.append(spec.name)
    return tuple(names)


def format_error(name: str) -> str | None:
    """Why `name` cannot be served, or None when it can."""
    if name in available_formats():
        return None
    choices = list(available_formats())
    if name in FORMATS:
        return (f"response format {name!r} needs an encoder this server's libsndfile "
                f"({soundfile.__libsndfile_version__}) lacks; use one of {choices}")
    return f"unsupported response format {name!r}; use one of {choices}"


def output_rate(name: str, model_rate: int, requested: int | None) -> int:
    """The sample rate a response carries: what was asked, else pcm at OpenAI's 24 kHz and
    the others at the model's rate (Opus: the nearest rate it supports, upwards)."""
    rate = requested or (OPENAI_PCM_RATE if name == "pcm" else model_rate)
    if name == "opus" and rate not in OPUS_RATES:
        rate = next((r for r in OPUS_RATES if r >= rate), OPUS_RATES[-1])
    return rate


class Encoder:
    """One response's encoder: `encode` each chunk, then `finish` once."""

    def __init__(self, name: str, model_rate: int, requested_rate: int | None = None) -> None:
        self.spec = FORMATS[name]
        self.sample_rate = output_rate(name, model_rate, requested_rate)
        self._resampler = StreamingResampler(model_rate, self.sample_rate)
        self._writer = _make_writer(name, self.sample_rate)
        self.num_samples = 0  # samples written, at the output rate

    @property
    def media_type(self) -> str:
        return self.spec.media_type

    def encode(self, samples: np.ndarray) -> bytes:
        """Float samples [N] at the model's rate -> the bytes that can go out now."""
        resampled = self._resampler.process(samples)
        self.num_samples += len(resampled)
        return self._writer.write(resampled)

    def finish(self) -> bytes:
        resampled = self._resampler.finish()
        self.num_samples += len(resampled)
        return self._writer.write(resampled) + self._writer.close()


class _PCMWriter:
    def __init__(self, header: bytes = b"") -> None:
        self._header = header

    def write(self, samples: np.ndarray) -> bytes:
        out, self._header = self._header + to_pcm16(samples), b""
        return out

    def close(self) -> bytes:
        return self._header


def _wav_header(sample_rate: int) -> bytes:
    """A mono 16-bit WAV header whose RIFF and data sizes are unknown (0xFFFFFFFF): readers
    take the data to run to the end of the stream."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", unknown) + b"WAVE" + b"fmt " + struct.pack("<I", 16)
            + fmt + b"data" + struct.pack("<I", unknown))


class _Sink:
    """A write-only file for libsndfile that hands its bytes out as they come.

    Bytes handed out are gone: when the encoder seeks back to patch a header at close
    (lengths, checksums), the patch is dropped unless the format is sent whole
    (`hold=True`). MP3: LAME writes a placeholder frame first, for the Info tag it fills
    in at close; a stream cannot wait for that, so the placeholder is left out and the
    stream starts at the first audio frame (decoders then size a constant-bit-rate stream
    right from its first frame).
    """

    def __init__(self, hold: bool = False, skip_placeholder_frame: bool = False) -> None:
        self.pending = bytearray()  # bytes from offset `sent` on, not yet handed out
        self.sent = 0
        self.position = 0
        self.hold = hold
        self.skip = skip_placeholder_frame

    def write(self, data: bytes) -> int:
        start, end = max(self.position, self.sent), self.position + len(data)
        if end > start:
            low = start - self.sent
            if len(self.pending) < low:
                self.pending.extend(bytes(low - len(self.pending)))
            self.pending[low: end - self.sent] = bytes(data)[start - self.position:]
        self.position = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.sent + len(self.pending)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        return b""

    def take(self) -> bytes:
        """The bytes that can go out now."""
        if self.hold:
            return b""
        if self.skip:
            # The placeholder is a frame header followed by zeros: the audio starts at the
            # next frame sync (0xFF).
            start = self.pending.find(b"\xff", 4)
            if start < 0:
                return b""
            del self.pending[:start]
            self.sent += start
            self.skip = False
        out = bytes(self.pending)
        self.sent += len(out)
        self.pending.clear()
        return out

    def take_all(self) -> bytes:
        self.hold = False
        return self.take()


class _SoundFileWriter:
    def __init__(self, name: str, sample_rate: int) -> None:
        spec = FORMATS[name]
        assert spec.soundfile_format is not None
        major, subtype = spec.soundfile_format
        self._sink = _Sink(hold=not spec.is_progressive, skip_placeholder_frame=name == "mp3")
        # NOTE: libsndfile applies CONSTANT only together with a compression level.
        options = {"bitrate_mode": "CONSTANT", "compression_level": 0.5} if name == "mp3" else {}
        self._file = soundfile.SoundFile(self._sink, "w", samplerate=sample_rate, channels=1,
                                         format=major, subtype=subtype, **options)
        if name == "opus":
            _set_ogg_page_latency(self._file, milliseconds=100.0)

    def write(self, samples: np.ndarray) -> bytes:
        if len(samples):
            self._file.write(samples)
        return self._sink.take()

    def close(self) -> bytes:
        self._file.close()
        return self._sink.take_all()


def _set_ogg_page_latency(file: soundfile.SoundFile, milliseconds: float) -> None:
    """libsndfile closes an Ogg page about once a second by default, so Opus audio would
    leave in 1 s bursts; SFC_SET_OGG_PAGE_LATENCY_MS (libsndfile >= 1.1) shortens that.
    soundfile has no wrapper for it, so this goes through its cffi handle."""
    set_page_latency_ms = 0x1302
    try:
        value = soundfile._ffi.new("double*", milliseconds)
        soundfile._snd.sf_command(file._file, set_page_latency_ms, value,
                                  soundfile._ffi.sizeof("double"))
    except AttributeError:  # another soundfile layout: keep libsndfile's default pages
        log.warning("cannot set the Ogg page latency: Opus streams in 1 s pages")


def _make_writer(name: str, sample_rate: int) -> _PCMWriter | _SoundFileWriter:
    if name == "pcm":
        return _PCMWriter()
    if name == "wav":
        return _PCMWriter(_wav_header(sample_rate))
    return _SoundFileWriter(name, sample_rate)
