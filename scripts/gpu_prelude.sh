# Sourced by the scripts/gpu_*.sh checks: the environment of a bare GPU machine (PyTorch
# and CUDA there, no network): the other packages from .gpu-wheels/ (scripts/gpu_wheels.sh;
# carry it), the tokenizers it trained, and a log of everything under $OUT.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$OUT"
exec > >(tee -a "$OUT/$(basename "$0" .sh).log") 2>&1
export PYTHON=${PYTHON:-python3} PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ -d .gpu-wheels/tokenizers ] && export POLYVOX_TOKENIZER_DIR=$PWD/.gpu-wheels/tokenizers
echo "== polyvox $(basename "$0") $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
echo "cpus: $(nproc)"
PACKAGES="numpy rich pyyaml sentencepiece tokenizers safetensors pytest fastapi uvicorn
          websockets python-multipart soundfile httptools uvloop httpx prometheus-client py-spy"
$PYTHON -m pip install --quiet --no-index --find-links .gpu-wheels $PACKAGES \
  || $PYTHON -m pip install --quiet --no-index --find-links .gpu-wheels \
       --break-system-packages $PACKAGES || echo "pip install failed"
$PYTHON -c "import torch, polyvox.server.app, polyvox.bench.remote; print('torch', torch.__version__)" \
  || { echo "the server does not import here: stopping"; exit 1; }
