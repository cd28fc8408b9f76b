#!/bin/sh
# What the official MySQL image's entrypoint does for Kubeflow Pipelines' Deployment
# (MYSQL_ALLOW_EMPTY_PASSWORD=true): an empty data folder gets a root account with an empty
# password that other pods may use; then the server runs with the Deployment's flags.
set -eu
datadir=/var/lib/mysql
for arg in "$@"; do
  case $arg in --datadir=*) datadir=${arg#--datadir=} ;; esac
done
if [ ! -d "$datadir/mysql" ]; then
  echo "initializing $datadir"
  mariadb-install-db --datadir="$datadir" --auth-root-authentication-method=normal \
    --skip-test-db >/dev/null
  mariadbd --datadir="$datadir" --skip-networking --socket=/tmp/init.sock &
  pid=$!
  i=0
  until mariadb --socket=/tmp/init.sock -uroot -e 'SELECT 1' >/dev/null 2>&1; do
    i=$((i + 1)); [ "$i" -lt 60 ] || { echo "mariadbd did not start" >&2; exit 1; }
    sleep 1
  done
  # root from any host with no password, as MYSQL_ALLOW_EMPTY_PASSWORD gives it; no anonymous
  # account (it would shadow root@'%' for connections from the pod's own host)
  mariadb --socket=/tmp/init.sock -uroot <<'SQL'
CREATE USER 'root'@'%' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
DROP USER IF EXISTS ''@'localhost';
FLUSH PRIVILEGES;
SQL
  kill "$pid"
  wait "$pid" || true
fi
exec mariadbd --bind-address=0.0.0.0 "$@"
