#!/usr/bin/env bash
# The two set-up commands of the README, for a fresh Debian 12 machine (run as root):
#   ./dev.sh demo   install what is needed, bring the lab up, converge it with `sparkctl up`,
#                   then status, doctor and a short bench against it
#   ./dev.sh test   install what is needed, bring the labs up and run the whole test suite
#                   (tests/unit, and tests/lab split over three labs, as four pytest processes side
#                   by side; with paths or node ids as arguments, one pytest over those, on the lab)
#   ./dev.sh install   only install what both need (apt + the venv)
# Both are idempotent: a second run reuses the venv, the packages and the running lab.
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(iproute2 openssh-server docker.io docker-registry busybox-static iputils-ping iperf3
              procps psmisc util-linux kmod ca-certificates prometheus prometheus-node-exporter rsync)
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

# apt's packages and the venv side by side: neither needs the other (python3 -m venv is the
# machine's own python), and on a fresh machine both download
install_both() {
  install_python &
  local py=$!
  trap "kill $py 2>/dev/null" EXIT  # apt failed (set -e ends the script): the venv's install ends too
  install_system
  trap - EXIT
  wait "$py"
}

install_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    say "python3 -m venv $VENV"
    python3 -m venv "$VENV"
  fi
  # sparkctl itself, and the lab (its own package in lab/: a development tool operators never install)
  if ! "$VENV/bin/python" -c "import sparkctl, sparkctl_lab, pytest, jsonschema, matplotlib" 2>/dev/null \
     || [ pyproject.toml -nt "$VENV/.installed" ] || [ lab/pyproject.toml -nt "$VENV/.installed" ]; then
    # uv, not pip: it fetches and installs in parallel (a fresh venv: ~20 s against pip's ~47 s on
    # two cores, bytecode included, as pip compiles it too); it is the first thing .ci/run waits for
    [ -x "$VENV/bin/uv" ] || "$VENV/bin/pip" install -q --disable-pip-version-check uv
    say "uv pip install -e .[test,report] -e ./lab"
    "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --compile-bytecode -e '.[test,report]' -e ./lab
    touch "$VENV/.installed"
  fi
  # bytecode for sparkctl's and the lab's own modules (an editable install compiles none): every
  # sparkctl run, simulated tool and simulator start (the lab's containers mount this tree read-only)
  # otherwise compiles them again where PYTHONDONTWRITEBYTECODE is set or the tree is read-only
  "$VENV/bin/python" -m compileall -q sparkctl lab/sparkctl_lab >/dev/null
}

# The whole suite as four pytest processes side by side: the lab tests on three labs at once, each
# its own pytest in the background (SPARKCTL_LAB_SPLIT: tests/conftest.py OTHER_LAB_FILES run on the
# lab they name, SPARKCTL_LAB_INSTANCE=1 or 2, every other lab file on the first; each session brings
# its lab up once, one owner per lab, in order), and tests/unit in the foreground, whose CPU fills the
# labs' waits. The unit output first, then each lab's (what it printed so far, then live), each ending
# in its own summary. Extra pytest options go to all three; with SPARKCTL_TEST_REPORTS=DIR each
# writes its junit XML there (unit.xml, lab.xml, lab1.xml, lab2.xml).
#
# All four in this script's session, the unit run at nice 10 (at nice 5 the labs took 820-870 s beside
# it; the unit run has slack). With the kernel's autogroups on, nice orders only inside a session;
# runs in sessions of their own (a lab's, the unit run's) moved CPU from the labs' containers and,
# beside `stress`, starved the unit run (benchmarks/suite-time.md, stop 47: tried, not kept). Only the
# labs' runs in sessions of their own, tried again with the drafter replaced (stop 49): 14 min 17 s plain,
# 18 min 49 s beside `stress --cpu 1` (one session: 13 min 22 s, and 15 min 25 s in stop 48).
LABS="0 1 2"  # sparkctl_lab.paths.INSTANCES
run_suite() {
  local reports=${SPARKCTL_TEST_REPORTS:-} logs=() pids=() rcs=() urc=0 i
  for i in $LABS; do
    logs[i]=$(mktemp "${TMPDIR:-/tmp}/sparkctl-lab$i-tests.XXXXXX.log")
    SPARKCTL_LAB_SPLIT=1 SPARKCTL_LAB_INSTANCE=$i "$VENV/bin/python" -m pytest -q tests/lab \
      ${reports:+"--junitxml=$reports/lab${i#0}.xml"} "$@" >"${logs[i]}" 2>&1 &
    pids[i]=$!
  done
  say "pytest tests/unit    (tests/lab runs beside it on three labs, pids ${pids[*]}; their output follows)"
  # Ctrl-C or CI's end: the lab runs stop too. TERM, not INT: a non-interactive shell starts its
  # background commands with SIGINT ignored, and Python keeps it so (an INT here never stopped them)
  trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' INT TERM
  nice -n 10 "$VENV/bin/python" -m pytest -q tests/unit ${reports:+"--junitxml=$reports/unit.xml"} "$@" || urc=$?
  for i in $LABS; do
    say "pytest tests/lab on lab $i    (started beside the unit tests: its output so far, then live)"
    tail -n +1 --pid="${pids[i]}" -f "${logs[i]}"
    rcs[i]=0
    wait "${pids[i]}" || rcs[i]=$?
    rm -f "${logs[i]}"
  done
  # exit 5 is "no test selected": fine for part of a -k/-m selection, not for all of it
  if [ "$urc" = 5 ] && [ "${rcs[0]}" = 5 ] && [ "${rcs[1]}" = 5 ] && [ "${rcs[2]}" = 5 ]; then
    echo "tests: FAILED: no test selected in tests/unit or tests/lab" >&2
    return 5
  fi
  [ "$urc" = 5 ] && urc=0
  local ok=1
  [ "$urc" = 0 ] || { echo "tests: FAILED: tests/unit (pytest exit $urc): its summary is above the labs' output" >&2; ok=0; }
  for i in $LABS; do
    [ "${rcs[i]}" = 5 ] && rcs[i]=0
    [ "${rcs[i]}" = 0 ] || { echo "tests: FAILED: tests/lab on lab $i (pytest exit ${rcs[i]}): its summary is above" >&2; ok=0; }
  done
  [ "$ok" = 1 ] && say "tests: tests/unit and tests/lab (on all three labs) passed"
  [ "$ok" = 1 ]
}

cmd=${1:-}
case "$cmd" in
  demo)
    need_root demo
    install_both
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
    install_both
    ;;
  test)
    need_root test
    install_both
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
