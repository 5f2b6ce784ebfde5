# Sourced by scripts/serve, scripts/test and scripts/bench: make sure .venv exists and is
# in step with pyproject.toml, then put it first on PATH. Quiet unless it has work to do.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.tether-stamp"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)-${TETHER_BOOTSTRAP_EXTRAS:-dev}"
if [[ ! -x "$VENV/bin/python" || ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  echo "tether: preparing $VENV (first run, or pyproject.toml changed)..." >&2
  PY="${PYTHON:-python3}"
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "tether: Python 3.11 or newer is required (found $("$PY" --version 2>&1))" >&2; exit 1; }
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -e "$ROOT[${TETHER_BOOTSTRAP_EXTRAS:-dev}]" >&2
  echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
