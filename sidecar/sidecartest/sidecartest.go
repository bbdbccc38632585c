// Package sidecartest runs a real sidecar agent in the test's process,
// against a real (embedded) etcd, for tests of the sidecar's users.
package sidecartest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/gossip"
)

// jobKeys holds one gossip key per job (its etcd endpoints and name), as a
// deployment gives each job a key of its own.
var jobKeys sync.Map

// GossipKey returns job's gossip key on endpoints (base64), made the first
// time it is asked for: every agent Start runs for the job shares it.
func GossipKey(t testing.TB, endpoints []string, job string) string {
	t.Helper()
	id := strings.Join(endpoints, ",") + " " + job
	if k, ok := jobKeys.Load(id); ok {
		return k.(string)
	}
	key, err := gossip.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := jobKeys.LoadOrStore(id, key)
	return k.(string)
}

// Agent is a running in-process sidecar.
type Agent struct {
	*sidecar.Agent
	// Socket is the trainer API's unix socket.
	Socket string
	stop   func() error
}

// Stop drains the agent (as SIGTERM would) and returns Run's result.
func (a *Agent) Stop() error { return a.stop() }

// Start runs sidecar id of job on endpoints until the test ends. mutate
// adjusts the config (fast test defaults are set).
func Start(t testing.TB, endpoints []string, job, id string, mutate ...func(*sidecar.Config)) *Agent {
	t.Helper()
	cfg := sidecar.DefaultConfig()
	cfg.Job.Job = job
	cfg.Job.TTL = 2 * time.Second
	cfg.Job.Settle = 50 * time.Millisecond
	cfg.Job.RestartSettle = 50 * time.Millisecond
	cfg.Etcd.Endpoints = endpoints
	cfg.MemberID, cfg.Advertise = id, "127.0.0.1"
	cfg.Socket = filepath.Join(t.TempDir(), id+".sock")
	cfg.GossipPort = 0
	cfg.GossipKeys = []string{GossipKey(t, endpoints, job)}
	cfg.NodeWatch = false
	cfg.SysfsRoot = t.TempDir()
	cfg.Grace = 3 * time.Second
	cfg.StatusInterval = 50 * time.Millisecond
	for _, f := range mutate {
		f(&cfg)
	}
	a, err := sidecar.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	var stopped bool
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-errc
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	select {
	case <-a.Started():
	case err := <-errc:
		stopped, runErr = true, err // the cleanup's stop must not wait for it again
		t.Fatalf("sidecar %s stopped at start: %v", id, err)
	}
	return &Agent{Agent: a, Socket: cfg.Socket, stop: stop}
}
