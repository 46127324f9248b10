# Shared by scripts/serve and scripts/test: idempotent machine set-up for Debian hosts.
# Each step checks first and does nothing when the machine already has what it needs.

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
    # apt_install PKG... : installs the Debian packages that are missing (needs root).
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! have apt-get; then
        log "missing packages: ${missing[*]} (install them, then run again)"
        return 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_uv() {
    have uv && return 0
    export PATH="$HOME/.local/bin:$PATH"
    have uv && return 0
    log "installing uv (from PyPI)"
    python3 -m pip install --quiet --user uv 2>/dev/null \
        || python3 -m pip install --quiet --break-system-packages --user uv
    have uv || { log "uv is not on PATH after install"; return 1; }
}

sync_python_env() {
    # sync_python_env DIR... : the locked Python environment, with bytecode compiled ahead for
    # it and for DIR... (the project's sources). Where .pyc files are never written
    # (PYTHONDONTWRITEBYTECODE, as on the CI image) every `sandgate` process would otherwise
    # compile each module it imports on every start: over half of a server's start-up CPU.
    uv sync --frozen --quiet --compile-bytecode
    uv run --frozen python -m compileall -q -j 0 "$@" >/dev/null
}

docker_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_docker() {
    docker_up && return 0
    have dockerd || apt_install docker.io
    if have systemctl && systemctl start docker 2>/dev/null; then :; else
        log "starting dockerd (log: /var/log/sandgate-dockerd.log)"
        nohup dockerd >/var/log/sandgate-dockerd.log 2>&1 &
    fi
    for _ in $(seq 1 120); do docker_up && return 0; sleep 0.5; done
    log "the Docker engine did not start; see /var/log/sandgate-dockerd.log"
    return 1
}
