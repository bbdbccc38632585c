#!/bin/sh
# horovodrun's --host-discovery-script: one host:slots line per member of
# the job's current generation, from this pod's ringside sidecar
# (RINGSIDE_SOCKET, or --socket). Horovod runs it every few seconds.
exec ringside discover-hosts "$@"
