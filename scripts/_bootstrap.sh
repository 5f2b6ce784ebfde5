# Sourced by scripts/serve, scripts/test, scripts/bench and scripts/interop: make sure .venv
# exists and is in step with pyproject.toml, then put it first on PATH. Quiet unless it has
# work to do, and then it says only what it does: pip's output goes to .venv/bootstrap.log,
# shown only when the install fails.
#
# TETHER_BOOTSTRAP_EXTRAS says what the caller needs: "runtime" (scripts/serve: Tether's own
# dependencies, nothing else) or "dev" (the default: the test and lint tools as well). A dev
# venv serves a runtime caller as it is; a runtime venv gets the dev tools added in place
# (pip keeps what is installed already), and a venv once made dev stays dev.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.tether-stamp"
need="${TETHER_BOOTSTRAP_EXTRAS:-dev}"
if [[ "$need" != runtime && "$need" != dev ]]; then
  echo "tether: TETHER_BOOTSTRAP_EXTRAS must be runtime or dev, not '$need'" >&2; exit 1
fi
hash="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [[ ! -x "$VENV/bin/python" || ( "$have" != "$hash-dev" && "$have" != "$hash-$need" ) ]]; then
  [[ "$have" == *-dev ]] && need=dev  # keep a dev venv's tools in step too
  echo "tether: preparing $VENV ($need dependencies; first run, or pyproject.toml changed)..." >&2
  PY="${PYTHON:-python3}"
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "tether: Python 3.11 or newer is required (found $("$PY" --version 2>&1))" >&2; exit 1; }
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  spec="$ROOT"
  [[ "$need" == dev ]] && spec="$ROOT[dev]"
  log="$VENV/bootstrap.log"
  # An editable install of a pyproject.toml project needs pip 21.3 or newer (PEP 660);
  # the pip that venv brings with Python 3.11 has it, so it is upgraded only when older.
  if ! "$VENV/bin/python" -c 'import sys
from pip import __version__ as v
sys.exit(tuple(map(int, v.split(".")[:2])) < (21, 3))' 2>/dev/null; then
    "$VENV/bin/python" -m pip install --disable-pip-version-check --upgrade pip >"$log" 2>&1 || {
      cat "$log" >&2; echo "tether: upgrading pip in $VENV failed (see $log)" >&2; exit 1; }
  fi
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$spec" >"$log" 2>&1; then
    cat "$log" >&2
    echo "tether: installing into $VENV failed; pip's output is above and in $log" >&2
    exit 1
  fi
  echo "$hash-$need" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
# Compiled here, once, so that no Tether process compiles its modules as it starts: where
# PYTHONDONTWRITEBYTECODE is set (some CI hosts set it) every guardian, front-end and CLI
# start would, about 0.25 s of CPU each. Only files changed since are compiled again; a
# checkout that cannot be written to just goes without.
"$VENV/bin/python" -m compileall -q "$ROOT/protocol" "$ROOT/shared" "$ROOT/guardian" \
  "$ROOT/frontend" "$ROOT/tests" "$ROOT/scripts" >/dev/null 2>&1 || true
