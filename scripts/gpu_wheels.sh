#!/usr/bin/env bash
# Download the wheels scripts/gpu_check.sh needs on a bare GPU machine (Python 3.12,
# PyTorch preinstalled, no network) into .gpu-wheels/ (git-ignored, ~30 MB): carry that
# folder with the tree to the GPU machine. Run it here, where the package index is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION=${PY_VERSION:-3.12}
# The pocket path: numpy, rich, pyyaml, sentencepiece, tokenizers, safetensors (and what
# they pull in); the CUDA tests: pytest. The Piper voice (~60 MB of ONNX) does not fit the
# carry limit: gpu_check.sh skips Piper when its extra is not importable. The server
# (scripts/gpu_overload.sh): fastapi, uvicorn, websockets, python-multipart, soundfile and
# what they pull in (pydantic's compiled core, cffi).
PACKAGES=(numpy rich pyyaml sentencepiece tokenizers safetensors pytest
          fastapi uvicorn websockets python-multipart soundfile httptools uvloop)
python3 -m pip download --quiet --dest .gpu-wheels --only-binary=:all: \
  --python-version "$PY_VERSION" --implementation cp --abi "cp${PY_VERSION/./}" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any "${PACKAGES[@]}"
# The random-weight models' tokenizer is trained from wordfreq's English list, a 57 MB
# wheel that does not fit the carry: train it here, gpu_check.sh points the loader at it.
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
POLYVOX_TOKENIZER_DIR=.gpu-wheels/tokenizers "$PYTHON" -c "
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
for kind in ('sentencepiece', 'tokenizers'):
    train_local_tokenizer(kind=kind)
"
du -sh .gpu-wheels
