#!/usr/bin/env bash
# What `make test` needs besides Python, checked (and provided) before a single test runs:
#   - redis-server (each test session, each pytest-xdist worker, starts a private one; its
#     package brings redis-cli, which joins the Redis Cluster tests' nodes), and a
#     Redis answering on 127.0.0.1:$REDIS_PORT (6379; the gate's database 13): started here
#     when none answers;
#   - valgrind (the instruction-count gate, bench/instructions.py);
#   - chromium (the dashboard's browser test drives the distribution's build, nothing downloaded);
#   - systemd-analyze (the systemd units are verified by it);
#   - faketime (the accelerated-clock YouTube test runs `chorus run` under libfaketime);
#   - espeak-ng (the stream overlay's local voice, the speech chain's last link).
# Missing tools are installed with apt-get when this may (root, or sudo without a password);
# otherwise it stops at once, printing the exact command to run. `.ci/run` calls it too.
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_LOG="${REDIS_LOG:-/tmp/chorus-test-redis.log}"

say() { printf 'prereqs: %s\n' "$*" >&2; }

redis_answers() {
  (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 && read -r -t 2 reply <&3 &&
    [[ "$reply" == +PONG* ]]) 2>/dev/null
}

have() { command -v "$1" >/dev/null 2>&1; }

missing=()
have redis-server || missing+=(redis-server)
have valgrind || missing+=(valgrind)
have chromium || have chromium-browser || missing+=(chromium)
have systemd-analyze || missing+=(systemd)
have faketime || missing+=(faketime)
have espeak-ng || missing+=(espeak-ng)

if ((${#missing[@]})); then
  apt=""
  if have apt-get; then
    if ((EUID == 0)); then
      apt="apt-get"
    elif have sudo && sudo -n true 2>/dev/null; then
      apt="sudo apt-get"
    fi
  fi
  if [[ -z "$apt" ]]; then
    say "missing: ${missing[*]}; install them, then run make test again:"
    printf '    sudo apt-get update && sudo apt-get install -y %s\n' "${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]} ($apt)"
  $apt update -qq
  DEBIAN_FRONTEND=noninteractive $apt install -y -qq "${missing[@]}" >/dev/null
  for tool in valgrind systemd-analyze faketime espeak-ng; do
    have "$tool" || { say "$tool is still missing after apt-get install"; exit 1; }
  done
  have chromium || have chromium-browser || { say "chromium is still missing"; exit 1; }
fi

if ! redis_answers; then
  have redis-server || { say "redis-server is still missing after apt-get install"; exit 1; }
  say "no Redis on 127.0.0.1:$REDIS_PORT; starting one (log: $REDIS_LOG)"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly no --logfile "$REDIS_LOG"
  for _ in {1..100}; do
    redis_answers && break
    read -r -t 0.1 _ <> <(:) || true # a 0.1 s wait without sleep(1)
  done
  redis_answers || { say "Redis did not start on 127.0.0.1:$REDIS_PORT; see $REDIS_LOG"; exit 1; }
fi
