#!/usr/bin/env bash
# Start dockerd when it is not running (idempotent); exit 0 once `docker info` answers.
# --iptables=false/--ip6tables=false: dockerd's NAT rules and FORWARD DROP policy would cut
# the lab's bridges in this namespace; containers on one user bridge need no NAT, and nothing
# in a test reaches the internet. Output: /var/log/logquake-dockerd.log.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null; then
    echo "dockerd is not installed (apt-get install docker.io)" >&2; exit 1
fi
if [ "$(id -u)" -ne 0 ]; then echo "starting dockerd needs root" >&2; exit 1; fi
log=/var/log/logquake-dockerd.log
# Its own session, so it outlives this script and a test run's process group.
setsid -f dockerd --iptables=false --ip6tables=false --ip-masq=false \
    --pidfile /run/logquake-dockerd.pid >>"$log" 2>&1 </dev/null
for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then exit 0; fi
    sleep 0.5
done
echo "dockerd did not come up within 60 s; last lines of $log:" >&2
tail -n 15 "$log" >&2
exit 1
