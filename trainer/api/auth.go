package api

// Who may call the trainer API. Every endpoint but GET /v1/healthz,
// /v1/readyz and /metrics serves only the pod's own trainer, since each
// either changes the member's place in the job (rendezvous and the event
// stream attach the trainer, heartbeats keep it attached, leave, failure
// and restart re-form the job) or hands out the generation's store token.
// A caller is the pod's trainer when:
//
//   - on the unix socket, its process runs under the sidecar's uid, or a
//     uid or gid the sidecar allows (--api-allow-uids, --api-allow-gids),
//     as the kernel reports it (SO_PEERCRED); or
//   - on either listener, it sends the API token in TokenHeader.
//
// Anyone else gets 403 and an ErrorBody.
const (
	// TokenHeader carries the API token: the content of the token file,
	// without the trailing newline.
	TokenHeader = "X-Ringside-Token"
	// TokenSuffix makes the token file's path from the socket's: the
	// token of /var/run/ringside/ringside.sock is in
	// /var/run/ringside/ringside.sock.token (TokenPath), in the pod's
	// shared emptyDir, unless the sidecar is given another path
	// (--api-token-file). The sidecar writes a new random token there at
	// every start, mode 0640, so the pod's containers that share the
	// directory's group read it and nobody else does. One file per socket:
	// sidecars whose sockets share a directory keep their own tokens.
	TokenSuffix = ".token"
)

// TokenPath is the token file of the sidecar serving socket.
func TokenPath(socket string) string { return socket + TokenSuffix }
