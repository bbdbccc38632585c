package sidecar

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/footprint"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/sidecar/preempt"
	"github.com/ringside/ringside/trainer/api"
)

// Config is everything `ringside sidecar` is told.
type Config struct {
	// Job is the coordinator's job config (namespace, job name, TTL,
	// settle window, policy, master ports).
	Job coordinator.Config

	// Etcd is how the sidecar reaches etcd: endpoints, TLS and
	// credentials.
	Etcd etcdconn.Config

	// MemberID defaults to the pod name; Advertise (the address trainers
	// of other pods reach this one at) to the pod IP.
	MemberID, Advertise, Node string
	// Slots is the number of trainer processes in the pod.
	Slots int
	// Topology is the member's topology path, broad to narrow. When empty
	// it is derived from NodeLabels.
	Topology   []string
	NodeLabels map[string]string

	// Socket is the unix socket of the trainer API (mode 0660, in a
	// directory of mode 0750); HTTPAddr optionally serves the same API on
	// TCP, a loopback address unless HTTPAllowNonLoopback.
	Socket, HTTPAddr     string
	HTTPAllowNonLoopback bool
	// ProbeAddr optionally serves the health answers and the metrics
	// (/healthz, /readyz, /metrics; nothing of the trainer's) on TCP, on
	// any address: for the kubelet's probes and Prometheus, which reach the
	// pod's IP, not its loopback or socket.
	ProbeAddr string
	// InstallTo, when set, is where the sidecar copies its own binary
	// before it serves, for a trainer container that runs its command
	// under `ringside exec` from a shared volume (restart mode injected
	// into an image without ringside).
	InstallTo string
	// NCCLConfFile, when set, is where the sidecar writes netopt's NCCL
	// settings for NCCL_CONF_FILE before it serves.
	NCCLConfFile string
	// APITokenFile is where the sidecar writes the API token that callers
	// without peer credentials (TCP, or another uid) send in
	// api.TokenHeader; empty: beside the socket (api.TokenPath).
	APITokenFile string
	// APIAllowUIDs and APIAllowGIDs are the uids and gids besides the
	// sidecar's own whose processes the unix socket takes for the pod's
	// trainer (the trainer container's runAsUser / runAsGroup).
	APIAllowUIDs, APIAllowGIDs []int

	// GossipPort is the memberlist port (0 picks a free one).
	GossipPort int
	// GossipKeyFile holds the keys that encrypt and authenticate gossip
	// (gossip.LoadKeys: one base64 key per line, the first encrypts). It
	// is read again when its content changes (checked every
	// GossipKeyCheck) and on ReloadGossipKeys (SIGHUP), and the new keys
	// are applied in place: a key rotation moves no member out of the pool
	// (gossip.Gossip.SetKeys has the three rounds). A Kubernetes Secret
	// mounted as a volume is such a file.
	GossipKeyFile string
	// GossipKeys are keys given directly, base64, the first encrypts
	// (RINGSIDE_GOSSIP_KEY); they change only with a restart. At most one
	// of GossipKeyFile and GossipKeys.
	GossipKeys []string
	// GossipKeyCheck is how often the key file is checked for a change.
	// 5 s: the kubelet takes up to a minute to update a mounted Secret, so
	// a rotation's round waits on it, not on this.
	GossipKeyCheck time.Duration
	// InsecureTrustedNetwork lets the sidecar gossip in plain text when
	// it has no key. Without a key anyone who reaches the gossip port can
	// declare members dead or gone and join the pool, so the sidecar
	// refuses to start without a key unless this says that every host
	// that can reach the port is trusted. A key, when given, is used
	// whatever this says.
	InsecureTrustedNetwork bool

	// Grace bounds how long a drain waits for the generation without this
	// member before leaving anyway.
	Grace time.Duration
	// StatusInterval throttles heartbeats written to etcd.
	StatusInterval time.Duration
	// DrainTaints are the Node taints that start a drain; NodeWatch turns
	// the Node watch on (it needs in-cluster credentials).
	DrainTaints []string
	NodeWatch   bool
	// PreemptionNotice is a file or a metadata endpoint whose notice
	// starts a drain, as a termination taint does (none by default).
	PreemptionNotice preempt.Notice
	// SysfsRoot is where netopt reads the node's topology.
	SysfsRoot string
	// AwaitTrainer joins the member pending: it enters the ring once its
	// trainer first asks for a rendezvous, not while it is still starting.
	AwaitTrainer bool
	// SocketReset destroys the trainer's TCP connections to a member
	// found dead, so a collective blocked on it fails at once (it needs
	// CAP_NET_ADMIN). Each reset lists the sockets of the host's
	// connection table, a millisecond or two of kernel time per member
	// death; a trainer that aborts its own collectives on a new generation
	// (ringside's Python client and Go ring trainer do) does not need it.
	SocketReset bool
	// TrainerTimeout is how long a trainer without an open event stream
	// stays attached after its last heartbeat (or answered rendezvous),
	// and how long a stream the sidecar ended may stay closed: then the
	// member leaves the ring until the trainer is back (trainer.go). A
	// trainer's closing its stream needs no timeout: it leaves at once.
	// 10 s: heartbeats come once a step, so this is three missed ones of a
	// 3 s step, while ringside's own clients (which stream) reconnect a
	// stream in under a second.
	TrainerTimeout time.Duration
	// TrainerStartGrace, when positive, takes a member whose trainer has
	// not attached this long after the sidecar joined out of the ring (for
	// a member that joined active, without AwaitTrainer). 0: a trainer that
	// never attached is never taken for gone, as a Horovod launcher that
	// asks only for the hosts never attaches.
	TrainerStartGrace time.Duration
	// Footprint is how the sidecar process sets up the Go runtime
	// (footprint.Apply, called by the command) and whether the agent
	// releases its startup pages once it holds its first generation.
	Footprint footprint.Config
}

// DefaultConfig returns the defaults, taking the member id, address and
// node from the downward-API variables POD_NAME, POD_IP and NODE_NAME.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Job:            coordinator.DefaultConfig("default", ""),
		Etcd:           etcdconn.DefaultConfig(),
		MemberID:       firstNonEmpty(os.Getenv("POD_NAME"), host),
		Advertise:      os.Getenv("POD_IP"),
		Node:           os.Getenv("NODE_NAME"),
		Slots:          1,
		Socket:         api.DefaultSocket,
		GossipPort:     7946,
		GossipKeyCheck: 5 * time.Second,
		// 30 s: Kubernetes' default terminationGracePeriodSeconds.
		Grace:          25 * time.Second,
		StatusInterval: time.Second,
		TrainerTimeout: 10 * time.Second,
		SocketReset:    true,
		DrainTaints:    preempt.DefaultTaints(),
		// The notice is off (no file, no URL) until one is given.
		PreemptionNotice: preempt.Notice{Interval: preempt.DefaultNoticeInterval},
		NodeWatch:        true,
		SysfsRoot:        "/sys",
		Footprint:        footprint.DefaultConfig(),
	}
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	if err := c.Job.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Etcd.Validate(); err != nil {
		errs = append(errs, err)
	}
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	if err := c.validateMember(); err != nil {
		errs = append(errs, err)
	}
	if c.Socket == "" && c.HTTPAddr == "" {
		errs = append(errs, errors.New("neither an API socket nor an HTTP address is set"))
	}
	if c.HTTPAddr != "" {
		if err := checkHTTPAddr(c.HTTPAddr, c.HTTPAllowNonLoopback); err != nil {
			errs = append(errs, err)
		}
		if c.tokenPath() == "" {
			bad("APITokenFile", "API token file", "is needed with an HTTP address and no socket: TCP callers prove they are the trainer with its token")
		}
	}
	if c.ProbeAddr != "" {
		if _, _, err := net.SplitHostPort(c.ProbeAddr); err != nil {
			errs = append(errs, fmt.Errorf("probe address %q: want host:port or :port: %w", c.ProbeAddr, err))
		}
	}
	for _, id := range append(slices.Clone(c.APIAllowUIDs), c.APIAllowGIDs...) {
		if id < 0 || id > math.MaxUint32 {
			errs = append(errs, fmt.Errorf("allowed uid or gid %d is out of range", id))
		}
	}
	if err := c.validateGossipKey(); err != nil {
		errs = append(errs, err)
	}
	if c.GossipPort < 0 || c.GossipPort > 65535 {
		bad("GossipPort", "gossip port", "must be 0-65535 (0 picks a free one), got %d", c.GossipPort)
	}
	if c.Grace <= 0 {
		bad("Grace", "drain grace period", "must be positive, got %s", c.Grace)
	}
	if c.StatusInterval <= 0 {
		bad("StatusInterval", "status interval", "must be positive, got %s", c.StatusInterval)
	}
	if c.TrainerTimeout <= 0 {
		bad("TrainerTimeout", "trainer timeout", "must be positive, got %s", c.TrainerTimeout)
	}
	if c.TrainerStartGrace < 0 {
		bad("TrainerStartGrace", "trainer start grace", "must not be negative, got %s", c.TrainerStartGrace)
	}
	if err := c.Footprint.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.PreemptionNotice.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateMember checks what this member publishes in etcd. Only a
// missing id or address points at the downward API: elsewhere the value
// was given and is wrong.
func (c Config) validateMember() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	switch err := record.ValidateID(c.MemberID); {
	case c.MemberID == "":
		bad("MemberID", "member id", "is empty: set it, or POD_NAME (in a pod, from the downward API)")
	case err != nil:
		bad("MemberID", "member", "%v", err)
	}
	switch {
	case c.Advertise == "":
		bad("Advertise", "advertise address", "is empty: set it, or POD_IP (in a pod, from the downward API)")
	case record.ValidateHost(c.Advertise) != nil:
		bad("Advertise", "advertise address", "%q: %v", c.Advertise, record.ValidateHost(c.Advertise))
	case net.ParseIP(c.Advertise) == nil:
		if _, err := net.LookupHost(c.Advertise); err != nil {
			bad("Advertise", "advertise address", "%q is neither an IP nor a resolvable name", c.Advertise)
		}
	}
	if c.Slots < 1 || c.Slots > record.MaxSlots {
		bad("Slots", "slots", "must be 1-%d, got %d", record.MaxSlots, c.Slots)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// What else the member record holds (node, topology).
	info := record.MemberInfo{ID: c.MemberID, Addr: c.Advertise, Slots: c.Slots, State: record.StateActive, Node: c.Node, Topology: c.Topology}
	if err := info.Validate(); err != nil {
		return fmt.Errorf("member: %w", err)
	}
	return nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// gossipConfig derives the gossip config from the sidecar's.
func (c Config) gossipConfig() (gossip.Config, error) {
	g := gossip.DefaultConfig(c.MemberID)
	g.Label = c.Job.Namespace + "/" + c.Job.Job
	g.BindAddr = "0.0.0.0"
	if ip := net.ParseIP(c.Advertise); ip != nil && ip.IsLoopback() {
		g.BindAddr = c.Advertise
	}
	g.BindPort = c.GossipPort
	g.AdvertiseAddr = c.Advertise
	keys, err := c.gossipKeys()
	if err != nil {
		return g, err
	}
	g.Keys = keys
	return g, nil
}

// ErrNoGossipKey is the config error of a sidecar given no gossip key and
// not told that its network is trusted.
var ErrNoGossipKey = errors.New("gossip has no key: anyone who reaches the gossip port could declare members dead and join the job")

func (c Config) validateGossipKey() error {
	switch {
	case c.GossipKeyFile != "" && len(c.GossipKeys) > 0:
		return record.BadField("GossipKeys", "gossip keys", "are given both in a file and directly: give one")
	case c.GossipKeyFile == "" && len(c.GossipKeys) == 0 && !c.InsecureTrustedNetwork:
		return ErrNoGossipKey
	case c.GossipKeyFile != "" && c.GossipKeyCheck <= 0:
		return record.BadField("GossipKeyCheck", "gossip key check interval", "must be positive, got %s", c.GossipKeyCheck)
	case len(c.GossipKeys) > 0:
		if _, err := gossip.DecodeKeys(c.GossipKeys); err != nil {
			return err
		}
	}
	return nil
}

// gossipKeys returns the configured keys, read from the file if one is
// set; none means plain text (allowed by Validate only on a trusted
// network).
func (c Config) gossipKeys() ([][]byte, error) {
	switch {
	case c.GossipKeyFile != "":
		return gossip.LoadKeys(c.GossipKeyFile)
	case len(c.GossipKeys) > 0:
		return gossip.DecodeKeys(c.GossipKeys)
	}
	return nil, nil
}
