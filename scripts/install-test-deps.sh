#!/usr/bin/env bash
# Installs the system packages the integration tests need on Debian 12:
#   - PostgreSQL 15 (server + client): tests start throwaway clusters with tests/pgcluster.py;
#     and the pgaudit extension, whose records the reader knows;
#   - rsyslog with TLS (rsyslog-gnutls): tests send syslog over TLS to a real rsyslogd;
#   - prometheus, for its promtool: tests check the alert rules (deploy/prometheus) and /metrics;
#   - faketime, for `make test-week-ahead` (no test depends on the day it runs);
#   - locales, whose sources localedef compiles for the test of a translated server;
#   - chromium (Debian's), which the end-to-end tests of the web pages drive headless through
#     Playwright's Python package (its own browser download is not used).
# Idempotent and silent when everything is present. Needs root to install; as another user it
# prints what is missing and exits 0 (the tests that need it then skip with a reason).
# Never leaves a PostgreSQL, rsyslog or Prometheus service running: the tests start their own
# PostgreSQL and rsyslogd on free ports, and of Prometheus only run promtool.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin

have_pkg() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
pg_missing=0
for tool in initdb pg_ctl postgres psql; do
    if [[ ! -x "$PG_BIN/$tool" ]]; then
        pg_missing=1
    fi
done
if ((pg_missing)); then
    missing+=(postgresql-15 postgresql-client-15)
fi
# pgaudit: its records are read as statement lines (tests/integration/test_pgaudit_pg.py).
if ! have_pkg postgresql-15-pgaudit; then
    missing+=(postgresql-15-pgaudit)
fi
if ! command -v rsyslogd >/dev/null 2>&1 && [[ ! -x /usr/sbin/rsyslogd ]]; then
    missing+=(rsyslog)
fi
if ! have_pkg rsyslog-gnutls; then
    missing+=(rsyslog-gnutls)
fi

# locales: the sources localedef compiles the German, French and Korean locales from, for the
# test of a server that logs in its own language (tests/integration/test_translated_pg.py).
if [[ ! -e /usr/share/i18n/locales/de_DE ]]; then
    missing+=(locales)
fi

# faketime (libfaketime): `make test-week-ahead` runs the suite with the clock moved a week ahead.
if ! command -v faketime >/dev/null 2>&1; then
    missing+=(faketime)
fi

# chromium: the web pages' end-to-end tests (tests/integration/web) drive /usr/bin/chromium.
if ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium fonts-dejavu-core)
fi

prom_missing=0
if ! command -v promtool >/dev/null 2>&1 && [[ ! -x /usr/bin/promtool ]]; then
    prom_missing=1
    missing+=(prometheus)
fi

if ((${#missing[@]} == 0)); then
    exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
    echo "install-test-deps: missing ${missing[*]}." >&2
    echo "install-test-deps: run 'sudo bash scripts/install-test-deps.sh' (or apt-get install them);" \
        "until then the tests that need them are skipped." >&2
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: missing ${missing[*]} and no apt-get here: install them by hand." >&2
    exit 1
fi

echo "install-test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# Keep package scripts from starting services (the Debian policy-rc.d mechanism; Docker images
# usually ship one already, which we then leave alone).
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# temporary, from scripts/install-test-deps.sh\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    own_policy=1
fi
cleanup() {
    if ((own_policy)); then
        rm -f "$policy"
    fi
}
trap cleanup EXIT

apt-get -qq update </dev/null
apt-get -qq install -y --no-install-recommends "${missing[@]}" </dev/null >/dev/null

if ((pg_missing)) && command -v pg_lsclusters >/dev/null 2>&1; then
    # The package creates a "15 main" cluster on port 5432; the tests never use it, so make sure
    # it is not left running (and does not start on boot).
    pg_lsclusters -h 2>/dev/null | while read -r version name _port status _rest; do
        if [[ "$version" == 15 && "$status" == online* ]]; then
            pg_ctlcluster "$version" "$name" stop || true
        fi
        if [[ "$version" == 15 && -f "/etc/postgresql/$version/$name/start.conf" ]]; then
            echo manual >"/etc/postgresql/$version/$name/start.conf"
        fi
    done
fi

if ((prom_missing)) && command -v systemctl >/dev/null 2>&1; then
    # Only promtool is wanted: the Prometheus server the package enables stays off, also on boot.
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi

for tool in initdb pg_ctl postgres psql; do
    if [[ ! -x "$PG_BIN/$tool" ]]; then
        echo "install-test-deps: $PG_BIN/$tool is still missing after the install" >&2
        exit 1
    fi
done
if ((prom_missing)) && ! command -v promtool >/dev/null 2>&1; then
    echo "install-test-deps: promtool is still missing after the install" >&2
    exit 1
fi
echo "install-test-deps: done"
