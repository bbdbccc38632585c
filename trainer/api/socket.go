package api

// Where the trainer API listens in a pod: the sidecar and the trainer
// containers share RunDir (an emptyDir), and the sidecar serves the API on
// DefaultSocket in it. Both sides default to these paths, and the webhook
// mounts and points at them, so a pod that overrides nothing works.
const (
	// RunDir is the directory the sidecar and the trainer share.
	RunDir = "/var/run/ringside"
	// DefaultSocket is the unix socket of the trainer API.
	DefaultSocket = RunDir + "/ringside.sock"
)
