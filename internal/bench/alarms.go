package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator/record"
)

// sidecarNamespace is the namespace a local job's sidecars register
// under: the sidecar's default.
const sidecarNamespace = "default"

// alarms counts, from a job's keys in etcd, the votes cast against members
// whose process was alive (false suspicions) and the generations committed
// without such a member (false evictions). The bench tells it whom it
// killed, and when; every other member, and a victim before its kill, was
// alive and its network up.
type alarms struct {
	client   *clientv3.Client
	prefix   string
	progress io.Writer

	mu          sync.Mutex
	killed      map[string]time.Time
	last        map[string]bool // the members of the latest generation
	suspicions  int
	evictions   int
	done        chan struct{}
	watchCancel context.CancelFunc
}

// watchAlarms follows the job from now until stop.
func watchAlarms(ctx context.Context, endpoints []string, namespace, job string, progress io.Writer) (*alarms, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	a := &alarms{client: c, prefix: record.Prefix(namespace, job), progress: progress, killed: map[string]time.Time{}, done: make(chan struct{})}
	ctx, a.watchCancel = context.WithCancel(ctx)
	wch := c.Watch(ctx, a.prefix, clientv3.WithPrefix())
	go func() {
		defer close(a.done)
		for resp := range wch {
			for _, ev := range resp.Events {
				a.apply(ev, time.Now())
			}
		}
	}()
	return a, nil
}

// kill notes that the bench killed member id now.
func (a *alarms) kill(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.killed[id] = time.Now()
}

// alive reports whether id's process ran at t; a.mu is held.
func (a *alarms) alive(id string, t time.Time) bool {
	at, ok := a.killed[id]
	return !ok || t.Before(at)
}

func (a *alarms) apply(ev *clientv3.Event, now time.Time) {
	rel := strings.TrimPrefix(string(ev.Kv.Key), a.prefix)
	if ev.Type != mvccpb.PUT {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case strings.HasPrefix(rel, record.SuspectsDir) && ev.Kv.Version == 1: // a vote, not its retry
		target, voter, _, err := record.DecodeVote(rel, ev.Kv.Value)
		if err == nil && a.alive(target, now) {
			a.suspicions++
			fmt.Fprintf(a.progress, "false suspicion: %s voted against %s, alive\n", voter, target)
		}
	case rel == record.GenerationKey:
		g, err := record.DecodeGeneration(ev.Kv.Value)
		if err != nil {
			return
		}
		in := map[string]bool{}
		for _, id := range g.IDs() {
			in[id] = true
		}
		for id := range a.last {
			if !in[id] && a.alive(id, now) {
				a.evictions++
				fmt.Fprintf(a.progress, "false eviction: generation %d left out %s, alive\n", g.Number, id)
			}
		}
		a.last = in
	}
}

// stop ends the watch and returns the counts.
func (a *alarms) stop() (suspicions, evictions int) {
	a.watchCancel()
	<-a.done
	a.client.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.suspicions, a.evictions
}
