#!/bin/sh
# Installs Agora Hub as a systemd service on this host; run as root:
#   deploy/systemd/install.sh [SOURCE]
# SOURCE is what pip installs: this checkout (the default), a wheel built with
# `python -m build`, or git+https://…/agora-hub.git@TAG.
#   CLIENT   the client SDK the hub depends on, when SOURCE is not a checkout:
#            its wheel, or git+https://…/agora-hub.git@TAG#subdirectory=clients/python
#   PYTHON   interpreter for the virtual environment (default python3, 3.11+)
#   DESTDIR  stage the files under this directory instead of /, without
#            creating the user or touching systemd (packaging, tests). A venv
#            is not relocatable: a staged one runs only where it was staged.
# Running it again upgrades the package and keeps the files in /etc/agora-hub.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
source=${1:-$(cd "$here/../.." && pwd)}
python=${PYTHON:-python3}
destdir=${DESTDIR:-}
prefix=/opt/agora-hub
confdir=/etc/agora-hub

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "install.sh: $python is not Python 3.11 or newer (set PYTHON)" >&2
    exit 1
fi

if [ -z "$destdir" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "install.sh: run as root (or set DESTDIR to stage the files)" >&2
        exit 1
    fi
    if command -v systemd-sysusers >/dev/null 2>&1; then
        install -D -m 0644 "$here/agora-hub.sysusers" /etc/sysusers.d/agora-hub.conf
        systemd-sysusers /etc/sysusers.d/agora-hub.conf
    elif ! getent passwd agora-hub >/dev/null; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin agora-hub
    fi
    group=agora-hub
else
    group=$(id -g)
fi

"$python" -m venv "$destdir$prefix"
# A checkout brings the client SDK the hub depends on (agora-hub-client, on no
# index); a wheel or Git URL of the hub needs it named too: give it as CLIENT.
client=${CLIENT:-}
if [ -z "$client" ] && [ -d "$source/clients/python" ]; then
    client=$source/clients/python
fi
"$destdir$prefix/bin/python" -m pip install --quiet ${client:+"$client"} "$source"

# Config readable by the service's group only; existing files are kept.
install -d -m 0750 -g "$group" "$destdir$confdir"
for name in hub.toml env tokens.json; do
    if [ ! -e "$destdir$confdir/$name" ]; then
        install -m 0640 -g "$group" "$here/$name" "$destdir$confdir/$name"
    fi
done
install -D -m 0644 "$here/agora-hub.service" "$destdir/etc/systemd/system/agora-hub.service"

if [ -z "$destdir" ]; then
    systemctl daemon-reload
    echo "Installed. Edit $confdir/hub.toml, env and tokens.json, then:"
    echo "  systemctl enable --now agora-hub"
fi
