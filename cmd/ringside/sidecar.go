package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/footprint"
	"github.com/ringside/ringside/sidecar/gossip"
)

func newSidecarCmd() *cobra.Command {
	cfg := sidecar.DefaultConfig()
	var topology, labels string
	memoryLimitMiB := cfg.Footprint.MemoryLimit / footprint.MiB
	cmd := &cobra.Command{
		Use:   "sidecar",
		Short: "Run the per-pod agent: membership, gossip failure detection, drain, trainer API",
		Long: `sidecar runs next to the trainer in every worker pod. It joins the job's ring
membership in etcd, finds dead peers by gossip within about a second and has
them evicted, destroys the trainer's connections to a dead peer so a blocked
collective fails at once, drains on SIGTERM or a node termination taint, and
serves the trainer API on a unix socket:

  GET  /v1/rendezvous?after=N&timeout=30s   long poll for the next generation
  GET  /v1/events                           JSON lines: generation, drain, member_dead, job_stopped
  POST /v1/heartbeat                        {"step":..,"samples":..,"step_time_s":..}
  POST /v1/failure                          {"peer":"w3","error":"..."}
  POST /v1/leave                            drain and leave
  POST /v1/restart                          the trainer failed (restart mode): the job's leader restarts or stops the job
  GET  /v1/healthz, /v1/readyz, /metrics   (also on --probe-addr, for probes)

Every flag can also be set through the environment: --etcd-endpoints is
RINGSIDE_ETCD_ENDPOINTS, and so on.`,
		Example: `  # in a pod (member id, address and node from the downward API)
  ringside sidecar --job llama --etcd-endpoints http://etcd:2379 --slots 8

  # etcd over mTLS; with etcd's authentication on, the certificate's common
  # name (here ringside/default/llama) is the job's etcd user
  ringside sidecar --job llama --etcd-endpoints https://etcd:2379 \
    --etcd-ca ca.crt --etcd-cert llama.crt --etcd-key llama.key

  # on a laptop, against 'ringside etcd'
  ringside gossip-key > /tmp/demo.key
  ringside sidecar --job demo --member-id w0 --advertise 127.0.0.2 \
    --socket /tmp/w0.sock --gossip-port 0 --gossip-key-file /tmp/demo.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateJobName(cfg.Job.Job, cfg.Job.Namespace); err != nil {
				return err
			}
			if topology != "" {
				cfg.Topology = strings.Split(topology, ",")
			}
			if labels != "" {
				m, err := parseLabels(labels)
				if err != nil {
					return err
				}
				cfg.NodeLabels = m
			}
			cfg.Footprint.MemoryLimit = memoryLimitMiB * footprint.MiB
			if err := cfg.Validate(); err != nil {
				return sidecarFlagErrors(err)
			}
			if err := footprint.Apply(cfg.Footprint, slog.Default()); err != nil {
				return err
			}
			agent, err := sidecar.New(cfg, slog.Default())
			if err != nil {
				return err
			}
			stop := reloadOnHangup(agent)
			defer stop()
			return agent.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	j := &cfg.Job
	f.StringVar(&j.Job, "job", j.Job, "job name (required): up to 63 letters, digits, '-', '_' and '.'")
	f.StringVar(&j.Namespace, "namespace", j.Namespace, "job namespace, named as the job is")
	addEtcdFlags(f, &cfg.Etcd)
	f.StringVar(&cfg.MemberID, "member-id", cfg.MemberID, "member id (default: POD_NAME or the host name)")
	f.StringVar(&cfg.Advertise, "advertise", cfg.Advertise, "address other workers reach this pod at (default: POD_IP)")
	f.StringVar(&cfg.Node, "node", cfg.Node, "Kubernetes node name, for the termination taint watch (default: NODE_NAME)")
	f.IntVar(&cfg.Slots, "slots", cfg.Slots, "trainer processes (ranks) in this pod; once a trainer names its slot (the Python client does, one process per slot under exec --live), the member is in the ring only while every slot's process is attached")
	f.StringVar(&topology, "topology", "", "topology path, broad to narrow, comma-separated (zone-a,block-1,rack-3,host-7)")
	f.StringVar(&labels, "node-labels", "", "node labels to derive the topology path from (key=value,...)")
	f.StringVar(&cfg.Socket, "socket", cfg.Socket, "unix socket of the trainer API (in a shared emptyDir)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "", "also serve the trainer API on this TCP address, loopback only (e.g. 127.0.0.1:7878); callers send the API token")
	f.BoolVar(&cfg.HTTPAllowNonLoopback, "http-allow-non-loopback", false, "let --http-addr be an address other than loopback (every caller still needs the API token)")
	f.StringVar(&cfg.ProbeAddr, "probe-addr", "", "also serve /healthz, /readyz and /metrics (nothing of the trainer API) on this TCP address, for the kubelet's probes and Prometheus (e.g. :9401)")
	f.StringVar(&cfg.NCCLConfFile, "nccl-conf-file", "", "write netopt's NCCL settings to this file before serving, for trainers pointed at it by NCCL_CONF_FILE")
	f.StringVar(&cfg.InstallTo, "install-to", "", "copy this binary to this path before serving, for a trainer container that runs `ringside exec` from a shared volume")
	f.StringVar(&cfg.APITokenFile, "api-token-file", "", "where to write the API token that callers without the sidecar's uid send in the X-Ringside-Token header (default: the socket's path + .token)")
	f.IntSliceVar(&cfg.APIAllowUIDs, "api-allow-uids", nil, "uids besides the sidecar's own whose processes the socket takes for this pod's trainer")
	f.IntSliceVar(&cfg.APIAllowGIDs, "api-allow-gids", nil, "gids whose processes the socket takes for this pod's trainer")
	f.IntVar(&cfg.GossipPort, "gossip-port", cfg.GossipPort, "gossip port, UDP and TCP (0 picks a free one)")
	f.StringVar(&cfg.GossipKeyFile, "gossip-key-file", "", "file with the gossip keys, one base64 AES key (16, 24 or 32 bytes) per line, the first encrypts; re-read when it changes and on SIGHUP (`ringside gossip-key` prints a key)")
	f.StringSliceVar(&cfg.GossipKeys, "gossip-key", nil, "gossip keys, base64, the first encrypts; prefer the env RINGSIDE_GOSSIP_KEY or a key file (a command line is visible to every process on the host)")
	f.DurationVar(&cfg.GossipKeyCheck, "gossip-key-check", cfg.GossipKeyCheck, "how often the gossip key file is checked for new keys")
	f.BoolVar(&cfg.InsecureTrustedNetwork, "insecure-trusted-network", false, "gossip in plain text when no key is given: only where every host that can reach the gossip port is trusted (anyone there can evict members and join the job)")
	f.IntVar(&j.MasterPort, "master-port", j.MasterPort, "first port of rank 0's store; it rotates with the generation")
	f.IntVar(&j.MasterPortRange, "master-port-range", j.MasterPortRange, "number of master ports to rotate through")
	f.IntVar(&j.Policy.Min, "min", j.Policy.Min, "smallest world size that trains (below it the job pauses)")
	f.IntVar(&j.Policy.Max, "max", j.Policy.Max, "largest world size (0: no limit); members beyond wait as standby")
	f.IntVar(&j.Policy.Unit, "unit", j.Policy.Unit, "world size is a multiple of this")
	f.DurationVar(&j.Settle, "settle", j.Settle, "how long the leader batches joins")
	f.DurationVar(&j.RestartSettle, "restart-settle", j.RestartSettle, "how long the leader batches joins while trainers run in restart mode (ringside exec), where each new generation restarts every process")
	f.IntVar(&j.ExpectedSize, "expected-size", j.ExpectedSize, "world size the job starts with (0: not set): its first generation forms once this many slots are in, or --start-window after --min are; between --min and --max")
	f.DurationVar(&j.StartWindow, "start-window", j.StartWindow, "with --expected-size: how long the start waits for it once --min slots are in (0: no wait)")
	f.StringVar((*string)(&j.Straggler.Action), "straggler-policy", string(j.Straggler.Action), "what the leader does about a straggler: report (name it: status, metric, the controller's Event) or replace (drain it out of the ring, no step lost, while the job stays at or above --min without it); on Kubernetes set the ElasticScaler's spec.straggler.policy instead, which also keeps the replacement off the node")
	f.Float64Var(&j.Straggler.Factor, "straggler-factor", j.Straggler.Factor, "a member is slow while its trainer's compute time per step is above this many times the ring's median")
	f.Int64Var(&j.Straggler.Window, "straggler-window", j.Straggler.Window, "steps a member stays slow before it is named a straggler (and back at pace before it is cleared)")
	f.Float64Var(&j.Straggler.MaxShare, "straggler-max-share", j.Straggler.MaxShare, "largest share of the ring's members named stragglers at once (at least one)")
	f.DurationVar(&j.TTL, "ttl", j.TTL, "member lease TTL (whole seconds)")
	f.DurationVar(&cfg.Grace, "grace", cfg.Grace, "longest a drain waits for the generation without this member")
	f.DurationVar(&cfg.StatusInterval, "status-interval", cfg.StatusInterval, "how often heartbeats are stored in etcd")
	f.StringSliceVar(&cfg.DrainTaints, "drain-taints", cfg.DrainTaints, "node taints that start a drain")
	f.StringVar(&cfg.PreemptionNotice.File, "preemption-notice-file", "", "a file whose appearance starts a drain (written by a node-level spot or maintenance handler into a volume of the pod)")
	f.StringVar(&cfg.PreemptionNotice.URL, "preemption-notice-url", "", "an instance metadata URL that answers 200 with a body other than FALSE once a termination is scheduled, e.g. http://169.254.169.254/latest/meta-data/spot/instance-action (AWS) or http://metadata.google.internal/computeMetadata/v1/instance/preempted (GCE); the answer starts a drain")
	f.DurationVar(&cfg.PreemptionNotice.Interval, "preemption-notice-interval", cfg.PreemptionNotice.Interval, "how often the preemption notice file and URL are checked")
	f.BoolVar(&cfg.AwaitTrainer, "await-trainer", cfg.AwaitTrainer, "join pending and enter the ring when the trainer first asks for a rendezvous or the event stream, so a slowly starting trainer (importing torch, loading data) does not stall the others; leave off when the trainers never call the sidecar, as Horovod's (its launcher asks for the hosts, not each worker; the webhook's ringside.dev/mode: launcher)")
	f.DurationVar(&cfg.TrainerTimeout, "trainer-timeout", cfg.TrainerTimeout, "a trainer without an open event stream is gone this long after its last heartbeat; its member then leaves the ring until the trainer is back (a trainer closing its event stream leaves at once)")
	f.DurationVar(&cfg.TrainerStartGrace, "trainer-start-grace", cfg.TrainerStartGrace, "without --await-trainer: take the member out of the ring when its trainer has not attached this long after start (0: never)")
	f.BoolVar(&cfg.SocketReset, "socket-reset", cfg.SocketReset, "destroy the trainer's TCP connections to a member found dead, so a collective blocked on it fails at once (needs CAP_NET_ADMIN; costs a listing of the host's connection table per death); false where the trainer aborts its own collectives on a new generation, as ringside's clients do")
	f.BoolVar(&cfg.NodeWatch, "node-watch", cfg.NodeWatch, "watch this pod's Node for termination taints (needs in-cluster credentials)")
	f.StringVar(&cfg.SysfsRoot, "sysfs-root", cfg.SysfsRoot, "where netopt reads the node's topology")
	f.Int64Var(&memoryLimitMiB, "memory-limit", memoryLimitMiB, "soft limit of the sidecar's Go memory in MiB, which the collector keeps to (0: none; GOMEMLIMIT wins)")
	f.BoolVar(&cfg.Footprint.ReleaseStartupPages, "release-startup-pages", cfg.Footprint.ReleaseStartupPages, "once running, unmap the executable's pages that only starting up used")
	return cmd
}

// reloadOnHangup has the agent read its gossip key file again on every
// SIGHUP until stop is called.
func reloadOnHangup(agent *sidecar.Agent) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-hup:
				agent.ReloadGossipKeys()
			case <-done:
				return
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

func newGossipKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gossip-key",
		Short: "Print a new random gossip key (AES-256, base64)",
		Long: `gossip-key prints a new random key for the encryption of a job's gossip:
32 random bytes, base64, one line: what --gossip-key-file holds (one key per
line, the first encrypts) and RINGSIDE_GOSSIP_KEY takes.

To rotate a job's key without a pod leaving the pool, change the key file of
every sidecar in three rounds, each reaching every pod before the next:
add the new key as the second line; move it first; remove the old one. The
sidecar reads the file again when it changes and on SIGHUP.`,
		Example: `  ringside gossip-key > gossip.key
  kubectl create secret generic llama-gossip --from-file=gossip.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := gossip.NewKey()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), key)
			return err
		},
	}
}

// sidecarFieldFlags names the flag of each sidecar.Config field.
var sidecarFieldFlags = fieldFlags{
	"MemberID":          "--member-id",
	"Advertise":         "--advertise",
	"Slots":             "--slots",
	"APITokenFile":      "--api-token-file",
	"GossipKeys":        "--gossip-key-file and --gossip-key",
	"GossipKeyCheck":    "--gossip-key-check",
	"GossipPort":        "--gossip-port",
	"Grace":             "--grace",
	"StatusInterval":    "--status-interval",
	"TrainerTimeout":    "--trainer-timeout",
	"TrainerStartGrace": "--trainer-start-grace",
}.merge(etcdFieldFlags, jobFieldFlags)

// sidecarFlagErrors names the flags behind a sidecar.Config error.
func sidecarFlagErrors(err error) error {
	err = flagErrors(err, sidecarFieldFlags)
	if errors.Is(err, sidecar.ErrNoGossipKey) {
		err = fmt.Errorf("%w. Give one with --gossip-key-file FILE (env RINGSIDE_GOSSIP_KEY_FILE; a mounted Secret, which can be rotated in place) "+
			"or with the env RINGSIDE_GOSSIP_KEY=<base64 key>; `ringside gossip-key` prints a new key. "+
			"Only where every host that can reach the gossip port is trusted, pass --insecure-trusted-network instead", err)
	}
	return err
}

func parseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--node-labels: %q is not key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}
