#!/usr/bin/env bash
# Start the app as a deployment does (the Dockerfile's CMD): bash scripts/serve.sh
#   PORT (default 8501), ADDRESS (default 0.0.0.0), MHA_VIZ_VENV (default ~/.venvs/mha-viz)
# Streamlit on its own limits no client: a public demo puts deploy/nginx/mha-viz.conf in front (README, Hosting).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MHA_VIZ_VENV:-$HOME/.venvs/mha-viz}"
exec "$venv/bin/python" -m streamlit run app.py --server.port "${PORT:-8501}" --server.address "${ADDRESS:-0.0.0.0}"
