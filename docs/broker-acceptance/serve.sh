#!/bin/bash
# serve.sh STORE PORT: `rocketstore serve` on STORE (created if new) with broker.conf beside this script.
# ROCKETSTORE overrides the command (default: `rocketstore`; from a checkout:
#   ROCKETSTORE="env PYTHONPATH=$PWD/src $PWD/.venv/bin/python -m rocketstore.cli").
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec ${ROCKETSTORE:-rocketstore} serve "$1" --create --listen "127.0.0.1:$2" --config "$HERE/broker.conf"
