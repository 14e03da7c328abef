# Shared helpers of scripts/demo and scripts/test (sourced, not run).

# The newest Python >= 3.12 on this machine, else python3 (>= 3.11 is supported).
find_python() {
  for candidate in python3.13 python3.12 /root/.pyenv/versions/3.12.1/bin/python python3; do
    if command -v "$candidate" >/dev/null 2>&1 || [ -x "$candidate" ]; then
      if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        echo "$candidate"; return 0
      fi
    fi
  done
  echo python3
}

# make_venv DIR PYTHON EXTRA [PIP ARGS...]: a virtualenv with memproc (the django-memproc distribution)
# installed editable with EXTRA. With MAKE_VENV_PROGRESS=1, pip's steps are shown as they happen.
make_venv() {
  local dir=$1 python=$2 extra=$3; shift 3
  if [ ! -x "$dir/bin/python" ]; then
    "$python" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  if [ -n "${MAKE_VENV_PROGRESS:-}" ]; then
    "$dir/bin/python" -m pip install --disable-pip-version-check --progress-bar off -e ".[$extra]" "$@" 2>&1 \
      | pip_progress || true
  else
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extra]" "$@" 2>&1 \
      | grep -v -i "is ignored" || true
  fi
  # Until the rename the distribution was "memproc", also the name of an unrelated PyPI package: either
  # one left in this venv would shadow or duplicate the memproc package.
  if "$dir/bin/python" -m pip show --quiet memproc >/dev/null 2>&1; then
    "$dir/bin/python" -m pip uninstall --quiet --yes memproc >/dev/null 2>&1 || true
  fi
  "$dir/bin/python" -c "import memproc, django; print('memproc', memproc.__version__, 'on Django', django.get_version())"
}

# pip_progress: pip's output (stdin) cut to one line per package collected or downloaded, then a count.
pip_progress() {
  local line
  while IFS= read -r line; do
    case $line in
      Collecting*) echo "    ${line%% (from *}" ;;
      *Downloading*) echo "      ${line#"${line%%Downloading*}"}" ;;
      "Installing collected packages:"*) echo "    Installing $(tr -cd , <<<"$line" | wc -c | awk '{print $1 + 1}') packages..." ;;
      "Successfully installed"*) echo "    Done: $(wc -w <<<"${line#Successfully installed}") packages installed." ;;
      ERROR*|*error:*) echo "$line" ;;
    esac
  done
}

# apt_install PACKAGE...: installs Debian packages that are missing (root only; quiet).
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "Missing Debian packages: ${missing[*]} (run as root or install them)" >&2; return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Redis on 127.0.0.1:6379 for the Celery worker test: started from Debian's redis-server when none answers.
redis_answers() {
  { exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && read -t 1 -r reply <&3 && [[ $reply == +PONG* ]]; } 2>/dev/null
}
ensure_redis() {
  redis_answers && return 0
  apt_install redis-server || return 1
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 50); do redis_answers && return 0; sleep 0.1; done
  echo "Redis did not start on 127.0.0.1:6379" >&2; return 1
}
