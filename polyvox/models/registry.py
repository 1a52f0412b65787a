"""Model names -> loaded models.

    pocket/joe-ar            our own AR voice distilled from Piper joe (weights ship in the
                             package; model card polyvox/models/pocket/joe_ar.md; needs
                             polyvox[piper]: the teacher's phonemizer and decoder), the
                             default: the most intelligible voice on the test split
                             (docs/voices.md)
    pocket/<config>          a Pocket TTS config (e.g. pocket/english, pocket/english_2m)
    pocket:<file.yaml>       a Pocket TTS config file
    piper/joe                the Piper en_US-joe-medium voice (needs polyvox[piper]), joe-ar's
                             teacher
    piper:<voice.onnx>       any Piper voice (.onnx with its .onnx.json beside it)
"""

from __future__ import annotations

from typing import Any

DEFAULT_MODEL = "pocket/joe-ar"  # the best voice by measurement: docs/voices.md


def model_names() -> list[str]:
    from polyvox.models.pocket.loader import preset_names

    return ["piper/joe", "pocket/joe-ar"] + [f"pocket/{name}" for name in preset_names()]


def load_model(name: str, weights: str | None = None, tokenizer: str | None = None,
               seed: int = 0, device: str = "cpu", precision: str = "float32") -> Any:
    """Load a model by name; raises ValueError with the known names when unknown.
    `precision` bfloat16 stores the matmul weights of Pocket models in bfloat16
    (layers/precision.py): ~2x the streams on CPUs with AVX512-BF16, ~1e-2 from float32;
    Piper's decoder, and joe-ar's student and decoder, likewise (their own lower_precision).
    On CPU, the AR models' linear layers run on prepacked weights (PackedLinear)."""
    import torch

    from polyvox.models.layers.precision import lower_precision, parse_precision, prepack_linears

    dtype = parse_precision(precision)
    check_device(device)
    family = _load(name, weights, tokenizer, seed, device)
    if dtype != torch.float32:
        modules = getattr(family, "modules", None)
        if hasattr(family, "lower_precision"):  # Piper: its decoder
            family.lower_precision(dtype)
        elif isinstance(modules, torch.nn.Module):
            lower_precision(modules, dtype)
        else:
            raise ValueError(f"precision {precision} is not available for {name}")
    if torch.device(device).type == "cpu":  # inference on CPU: prepacked linear weights
        for root in (getattr(family, "modules", None), getattr(family, "flow_lm", None)):
            if isinstance(root, torch.nn.Module):  # Pocket: both (flow_lm is in modules)
                prepack_linears(root)
    return family


def check_device(device: str) -> None:
    """A clear error for a device this machine does not have."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but this machine (or this torch "
                         "build) has no CUDA GPU: use --device cpu")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} is not supported: use cpu or cuda")


def import_model_code(name: str) -> None:
    """Import what loading `name` needs (onnx, onnxruntime, the phonemizer: ~1 s for
    Piper), so that a start can time the imports apart from the loading. Unknown names
    import nothing (loading them raises the error)."""
    if name == "pocket/joe-ar":
        import polyvox.models.joe_ar.family  # noqa: F401
    if name == "pocket/joe-ar" or name == "piper/joe" or name.startswith("piper:"):
        try:
            import polyvox.models.piper.family  # noqa: F401
            import polyvox.models.piper.model  # noqa: F401
            import polyvox.models.piper.onnx_graph  # noqa: F401
        except ImportError:
            pass  # loading says what is missing
    elif name.startswith(("pocket/", "pocket:")):
        import polyvox.models.pocket.loader  # noqa: F401


def _load(name: str, weights: str | None, tokenizer: str | None, seed: int,
          device: str) -> Any:
    if name == "pocket/joe-ar":
        _require_piper_extra(name)  # its text front, flow and decoder are the teacher's
        from polyvox.models.joe_ar.family import load_student_family

        return load_student_family(weights=weights, seed=seed, device=device)
    if name.startswith("pocket/") or name.startswith("pocket:"):
        from polyvox.models.pocket.loader import load_pocket

        return load_pocket(name[7:], weights=weights, tokenizer=tokenizer, seed=seed,
                           device=device)
    if name == "piper/joe" or name.startswith("piper:"):
        _require_piper_extra(name)
        from polyvox.models.piper.family import PiperFamily
        from polyvox.models.piper.model import PiperModel

        return PiperFamily(PiperModel.load(None if name == "piper/joe" else name[6:],
                                           device=device))
    raise ValueError(f"unknown model {name!r}: use piper/joe, piper:<voice.onnx>, "
                     "pocket/<config> or pocket:<config.yaml> (see `polyvox models`)")


def _require_piper_extra(name: str) -> None:
    """A clear error when the Piper extra (onnxruntime, espeak-ng phonemizer) is missing."""
    try:
        import polyvox.models.piper.family  # noqa: F401
    except ImportError as error:
        raise ValueError(
            f"model {name} needs the Piper extra: pip install 'polyvox[piper]' ({error})"
        ) from None
