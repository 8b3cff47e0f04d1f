#!/usr/bin/env bash
# Run a command inside the project's Python 3.12 virtualenv (.venv), creating it and installing
# requirements.txt first when needed (again whenever requirements.txt changes).
#   scripts/with_venv.sh python -m trace_jax.main --config=configs/tiny.py
#   scripts/with_venv.sh python -m pytest
set -euo pipefail
cd "$(dirname "$0")/.."

is_py312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }

find_python() {
  local c
  for c in "${PYTHON:-}" python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12 \
           "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3; do
    [ -n "$c" ] && is_py312 "$c" && { echo "$c"; return 0; }
  done
  if command -v pyenv >/dev/null 2>&1; then
    c=$(pyenv root)/versions/$(pyenv versions --bare | grep -E '^3\.12' | tail -n1)/bin/python3.12
    is_py312 "$c" && { echo "$c"; return 0; }
  fi
  echo "error: Python 3.12 not found (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

if [ ! -x .venv/bin/python ] || ! is_py312 .venv/bin/python; then
  py=$(find_python)
  echo "[with_venv] creating .venv with $py" >&2
  rm -rf .venv
  "$py" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[with_venv] installing requirements.txt" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
exec "$@"
