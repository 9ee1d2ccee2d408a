#!/usr/bin/env bash
# The two set-up commands of the README, for a fresh Debian 12 machine (run as root):
#   ./dev.sh demo   install what is needed, bring the lab up, converge it with `sparkctl up`,
#                   then status, doctor and a short bench against it
#   ./dev.sh test   install what is needed, bring the lab up and run the whole test suite
#                   (tests/unit and tests/lab as two pytest processes side by side; with paths or
#                   node ids as arguments, one pytest over those)
#   ./dev.sh install   only install what both need (apt + the venv)
# Both are idempotent: a second run reuses the venv, the packages and the running lab.
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(iproute2 openssh-server docker.io docker-registry busybox-static iputils-ping iperf3
              procps psmisc util-linux kmod ca-certificates prometheus prometheus-node-exporter)
VENV=${SPARKCTL_VENV:-.venv}
# Fence every SSH/HTTP connection sparkctl makes to loopback and the lab's own range: the shipped
# inventories hold real-world addresses that must never be contacted from here.
export SPARKCTL_ONLY_NETWORKS=${SPARKCTL_ONLY_NETWORKS:-127.0.0.0/8,10.231.0.0/16}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "error: the lab needs root (network namespaces, sshd, dockerd); run: sudo ./dev.sh $1" >&2
    exit 2
  fi
}

install_system() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # Debian's packages try to start their services; the lab runs its own per host.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

install_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    say "python3 -m venv $VENV"
    python3 -m venv "$VENV"
  fi
  # sparkctl itself, and the lab (its own package in lab/: a development tool operators never install)
  if ! "$VENV/bin/python" -c "import sparkctl, sparkctl_lab, pytest, jsonschema, matplotlib" 2>/dev/null \
     || [ pyproject.toml -nt "$VENV/.installed" ] || [ lab/pyproject.toml -nt "$VENV/.installed" ]; then
    say "pip install -e .[test,report] -e ./lab"
    "$VENV/bin/pip" install -q --disable-pip-version-check -e '.[test,report]' -e ./lab
    touch "$VENV/.installed"
  fi
}

# The whole suite as two pytest processes side by side: tests/lab in the background (the lab fixture
# brings the lab up once, tests/conftest.py; one owner, in order) and tests/unit in the foreground,
# whose CPU fills the lab's waits: at nice 5, so the lab's run (the critical path) has the cores
# first whenever it wants them, and the unit tests take what it leaves. The unit output first, then the lab's (what it printed so far,
# then live), each ending in its own summary. Extra pytest options go to both; with
# SPARKCTL_TEST_REPORTS=DIR each writes its junit XML there (unit.xml, then lab.xml).
run_suite() {
  local reports=${SPARKCTL_TEST_REPORTS:-} log lab urc=0 lrc=0
  log=$(mktemp "${TMPDIR:-/tmp}/sparkctl-lab-tests.XXXXXX.log")
  "$VENV/bin/python" -m pytest -q tests/lab ${reports:+"--junitxml=$reports/lab.xml"} "$@" >"$log" 2>&1 &
  lab=$!
  trap 'kill -INT "$lab" 2>/dev/null || true' INT TERM  # Ctrl-C or CI's end: the lab run stops too
  say "pytest tests/unit    (tests/lab runs beside it, pid $lab, its output follows: $log)"
  nice -n 5 "$VENV/bin/python" -m pytest -q tests/unit ${reports:+"--junitxml=$reports/unit.xml"} "$@" || urc=$?
  say "pytest tests/lab     (started beside the unit tests: its output so far, then live)"
  tail -n +1 --pid="$lab" -f "$log"
  wait "$lab" || lrc=$?
  rm -f "$log"
  # exit 5 is "no test selected": fine for one half of a -k/-m selection, not for both
  if [ "$urc" = 5 ] && [ "$lrc" = 5 ]; then echo "tests: FAILED: no test selected in tests/unit or tests/lab" >&2; return 5; fi
  [ "$urc" = 5 ] && urc=0
  [ "$lrc" = 5 ] && lrc=0
  [ "$urc" = 0 ] || echo "tests: FAILED: tests/unit (pytest exit $urc): its summary is above the lab's output" >&2
  [ "$lrc" = 0 ] || echo "tests: FAILED: tests/lab (pytest exit $lrc): its summary is just above" >&2
  [ "$urc" = 0 ] && [ "$lrc" = 0 ] && say "tests: tests/unit and tests/lab passed"
  [ "$urc" = 0 ] && [ "$lrc" = 0 ]
}

cmd=${1:-}
case "$cmd" in
  demo)
    need_root demo
    install_system
    install_python
    INV=/var/lib/sparkctl-lab/inventory.yaml
    say "sparkctl lab up                      (three namespaced hosts, real sshd + dockerd, registry)"
    "$VENV/bin/sparkctl" lab up
    say "sparkctl up -i $INV                  (fabric, images, caches, Engram, runtime, record)"
    "$VENV/bin/sparkctl" up -i "$INV"
    say "sparkctl up -i $INV   again          (nothing to change, and it says so)"
    "$VENV/bin/sparkctl" up -i "$INV"
    say "sparkctl status -i $INV"
    "$VENV/bin/sparkctl" status -i "$INV"
    say "sparkctl doctor -i $INV"
    "$VENV/bin/sparkctl" doctor -i "$INV" || true
    say "sparkctl bench -i $INV --repeats 1   (the sparkdash protocol; the lab runs ~100x a real Spark)"
    mkdir -p results
    "$VENV/bin/sparkctl" bench -i "$INV" --repeats 1 --out results/bench-lab.json
    cat >&2 <<'EOT'

The lab cluster is up and serving. Try:
  .venv/bin/sparkctl status -i /var/lib/sparkctl-lab/inventory.yaml
  ip netns list                                    # lab-head, lab-worker, lab-offload, lab-switch
  ssh -F /var/lib/sparkctl-lab/ssh/config head nvidia-smi
  ip -n lab-worker link set enP2p1s0f0np0 mtu 1500 # break a rail the way a bad cable would ...
  .venv/bin/sparkctl doctor -i /var/lib/sparkctl-lab/inventory.yaml --only fabric   # ... see it
  .venv/bin/sparkctl up -i /var/lib/sparkctl-lab/inventory.yaml                     # ... repair only that
  .venv/bin/sparkctl lab down                      # leaves nothing behind
EOT
    ;;
  install)  # what both commands install, alone (.ci/run: before the floors suite starts beside the tests)
    need_root install
    install_system
    install_python
    ;;
  test)
    need_root test
    install_system
    install_python
    shift
    # arguments naming tests (a path, a node id): one pytest over just those
    for a in "$@"; do
      if [ -e "${a%%::*}" ]; then
        say "pytest $*"
        exec "$VENV/bin/python" -m pytest -q "$@"
      fi
    done
    run_suite "$@"
    ;;
  *)
    echo "usage: ./dev.sh demo | test [pytest args] | install" >&2
    exit 2
    ;;
esac
