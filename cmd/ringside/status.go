package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/etcdconn"
	"github.com/ringside/ringside/coordinator/jobstatus"
)

// statusOptions are the flags of `ringside status`.
type statusOptions struct {
	job, namespace    string
	etcd              etcdconn.Config
	interval, timeout time.Duration
	once, asJSON      bool
}

func newStatusCmd() *cobra.Command {
	o := statusOptions{
		namespace: "default",
		etcd:      etcdconn.DefaultConfig(),
		interval:  time.Second,
		timeout:   5 * time.Second,
	}
	cmd := &cobra.Command{
		Use:   "status --job JOB",
		Short: "Show a job's generation and members in ring order, live or once",
		Long: `status reads a job's keys from etcd and shows its committed generation (number,
world size, paused, leader, master address, total samples/s) and one row per
member in ring order: rank, id, address, slots, state, and what its sidecar
last reported (step, samples/s, median step time, heartbeat age).

States: active; draining (leaving, e.g. preempted); gone (in the generation
but no longer registered: it crashed or left, the next generation drops it);
waiting (registered, in no generation yet); unknown (its record is
malformed). Malformed values are listed as warnings.

Without --once the view refreshes every --interval, and at once when a new
generation is committed, until interrupted. On a terminal it redraws in
place; into a pipe or a log it prints a snapshot only when the generation,
the members or their states change. --json prints each snapshot as one JSON
line instead (every refresh), for scripts.

The connection flags can also be set through the environment, as for the
sidecar: RINGSIDE_JOB, RINGSIDE_NAMESPACE, RINGSIDE_ETCD_ENDPOINTS,
RINGSIDE_ETCD_CERT, RINGSIDE_ETCD_KEY, RINGSIDE_ETCD_CA, RINGSIDE_ETCD_USER
and RINGSIDE_ETCD_PASSWORD_FILE; RINGSIDE_ETCD_PASSWORD holds the password
of --etcd-user (no flag, so it shows in no process list).`,
		Example: `  # live view of a job, against a local 'ringside etcd'
  ringside status --job llama

  # one snapshot for a script
  ringside status --job llama --etcd-endpoints http://etcd-0:2379,http://etcd-1:2379 --once --json | jq '.members[].state'

  # from inside a worker pod, where the sidecar's environment names the job
  kubectl exec llama-worker-0 -c ringside -- ringside status --once

  # etcd with client certificates
  ringside status --job llama --etcd-endpoints https://etcd:2379 \
    --etcd-ca ca.crt --etcd-cert client.crt --etcd-key client.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.job, "job", o.job, "job name (required)")
	f.StringVar(&o.namespace, "namespace", o.namespace, "job namespace")
	addEtcdFlags(f, &o.etcd)
	f.DurationVar(&o.interval, "interval", o.interval, "time between refreshes of the live view")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "how long each read waits for etcd before giving up")
	f.BoolVar(&o.once, "once", false, "print one snapshot and exit")
	f.BoolVar(&o.asJSON, "json", false, "print snapshots as JSON lines")
	return cmd
}

func (o statusOptions) validate() error {
	errs := []error{validateJobName(o.job, o.namespace), flagErrors(o.etcd.Validate(), etcdFieldFlags)}
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("--interval must be positive, got %s", o.interval))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %s", o.timeout))
	}
	return errors.Join(errs...)
}

// runStatus prints the job's status until ctx ends, or once. A failed
// first read is an error; later ones are shown and retried, so a live view
// rides out an etcd restart.
func runStatus(ctx context.Context, out io.Writer, o statusOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	o.etcd.DialTimeout = o.timeout
	client, err := etcdconn.New(o.etcd)
	if err != nil {
		return err
	}
	defer client.Close()
	s, err := o.read(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p := jobstatus.NewPrinter(out, o.asJSON)
	if o.once {
		return p.Once(s)
	}
	return o.follow(ctx, client, p, s)
}

// read takes one snapshot, bounded by --timeout.
func (o statusOptions) read(ctx context.Context, client *clientv3.Client) (jobstatus.Snapshot, error) {
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	s, err := jobstatus.Read(rctx, client, o.namespace, o.job)
	switch {
	case err == nil:
		return s, nil
	case ctx.Err() == nil && rctx.Err() != nil:
		return s, fmt.Errorf("etcd at %s did not answer within %s; check --etcd-endpoints (env RINGSIDE_ETCD_ENDPOINTS) and that etcd is running: %w",
			strings.Join(o.etcd.Endpoints, ","), o.timeout, err)
	}
	return s, fmt.Errorf("etcd at %s: %w", strings.Join(o.etcd.Endpoints, ","), err)
}

// follow shows s, then a snapshot every interval and whenever the
// generation changes, until ctx ends.
func (o statusOptions) follow(ctx context.Context, client *clientv3.Client, p *jobstatus.Printer, s jobstatus.Snapshot) error {
	if err := p.Show(s, nil); err != nil {
		return err
	}
	return jobstatus.Follow(ctx, client, o.namespace, o.job, s.Revision, o.interval, func() error {
		s, err := o.read(ctx, client)
		if ctx.Err() != nil {
			return nil // Follow returns too
		}
		if err != nil {
			slog.Warn("status read failed; retrying", "err", err)
		}
		return p.Show(s, err)
	})
}
