#!/bin/sh
# horovodrun's host discovery: the members of the job's current generation,
# from this pod's ringside sidecar (RINGSIDE_SOCKET, set by the webhook).
exec /usr/local/bin/ringside discover-hosts
