package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/localjob"
	"github.com/ringside/ringside/trainer/api"
)

// recorder builds the history while the run goes on: it watches the job's
// key space in etcd (generation commits with the election's leader at their
// revision, registrations, evictions), reads every trainer's step lines and
// follows each sidecar's event stream. Its goroutines end when the context
// given to startRecorder ends; stop waits for them.
type recorder struct {
	prefix string
	client *clientv3.Client

	mu      sync.Mutex
	h       History
	leaders map[string]electionKey // election key -> who, by create revision
	// recorded are the leases eviction records named (evicted/<id>).
	recorded map[int64]bool
	changed  chan struct{}   // closed and replaced on every change
	first    map[string]bool // workers whose trainer printed a line

	wg sync.WaitGroup
}

type electionKey struct {
	who string
	rev int64
}

func startRecorder(ctx context.Context, endpoints []string, namespace, job string, lines <-chan localjob.Line) (*recorder, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("recorder: etcd client: %w", err)
	}
	r := &recorder{prefix: record.Prefix(namespace, job), client: c, leaders: map[string]electionKey{}, recorded: map[int64]bool{},
		changed: make(chan struct{}), first: map[string]bool{}}
	r.h.Start = time.Now()
	r.h.Workers = map[string]*Life{}
	resp, err := c.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("recorder: read %s: %w", r.prefix, err)
	}
	for _, kv := range resp.Kvs {
		r.apply(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.watch(ctx, resp.Header.Revision+1) }()
	go func() { defer r.wg.Done(); r.readLines(ctx, lines) }()
	return r, nil
}

// stop waits for the recorder's goroutines (its context must have ended)
// and returns the history.
func (r *recorder) stop() History {
	r.wg.Wait()
	r.client.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h
}

// watch follows the key space from rev; the client retries through an
// etcd outage, and a watch that ends anyway is opened again where it
// stopped, so no revision is missed.
func (r *recorder) watch(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wch := r.client.Watch(clientv3.WithRequireLeader(ctx), r.prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			r.mu.Lock()
			for _, ev := range resp.Events {
				r.apply(ev)
				rev = ev.Kv.ModRevision + 1
			}
			r.notify()
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // etcd is down: the next watch waits for it
		}
	}
}

// apply records one change of the key space; r.mu is held (or the
// recorder not yet shared).
func (r *recorder) apply(ev *clientv3.Event) {
	now := time.Now()
	rel := strings.TrimPrefix(string(ev.Kv.Key), r.prefix)
	switch {
	case strings.HasPrefix(rel, record.ElectionDir):
		if ev.Type == mvccpb.DELETE {
			delete(r.leaders, rel)
		} else {
			r.leaders[rel] = electionKey{who: string(ev.Kv.Value), rev: ev.Kv.CreateRevision}
		}
	case rel == record.GenerationKey && ev.Type == mvccpb.PUT:
		g, err := record.DecodeGeneration(ev.Kv.Value)
		if err != nil {
			return
		}
		r.h.Commits = append(r.h.Commits, Commit{Number: g.Number, Members: g.IDs(), Standby: g.Standby, Paused: g.Paused,
			Leader: g.Leader, Term: r.leaderLocked(), Revision: ev.Kv.ModRevision, Observed: now, Reason: g.Reason})
	case strings.HasPrefix(rel, record.EvictedDir) && ev.Type == mvccpb.PUT:
		if lease, err := strconv.ParseInt(string(ev.Kv.Value), 16, 64); err == nil {
			r.recorded[lease] = true
		}
	case strings.HasPrefix(rel, record.MembersDir):
		id := strings.TrimPrefix(rel, record.MembersDir)
		if ev.Type == mvccpb.PUT {
			r.h.Registrations = append(r.h.Registrations, Registration{Member: id, Lease: ev.Kv.Lease, Revision: ev.Kv.ModRevision, At: now})
		} else if ev.PrevKv != nil {
			r.h.Evictions = append(r.h.Evictions, Eviction{Member: id, Lease: ev.PrevKv.Lease, Revision: ev.Kv.ModRevision, At: now,
				Recorded: r.recorded[ev.PrevKv.Lease]})
		}
	}
}

// leaderLocked is who leads the election: the lowest create revision.
func (r *recorder) leaderLocked() string {
	var best electionKey
	for _, k := range r.leaders {
		if best.rev == 0 || k.rev < best.rev {
			best = k
		}
	}
	return best.who
}

func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// readLines records the trainers' step lines, and starts following a
// worker's event stream once its trainer printed its first line. The
// recorder's stream observes (client.Observe): it never stands in for the
// trainer's presence.
func (r *recorder) readLines(ctx context.Context, lines <-chan localjob.Line) {
	for {
		select {
		case l := <-lines:
			if l.Text != "" {
				continue // not a step line
			}
			r.mu.Lock()
			if l.Event == "" {
				r.h.Steps = append(r.h.Steps, Step{Worker: l.Worker, Step: l.Step, Generation: l.Generation, World: l.World, At: l.Time()})
			}
			if !r.first[l.Worker] {
				r.first[l.Worker] = true
				r.notify()
			}
			r.notify()
			r.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// follow records worker w's generation events until its sidecar ends or
// ctx does, reconnecting when the stream breaks.
func (r *recorder) follow(ctx context.Context, w *localjob.Worker) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			events, err := w.API.Observe(ctx)
			if err == nil {
				for e := range events {
					if e.Type == api.EventGeneration && e.Generation != nil {
						r.deliver(w.ID, e)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-w.Sidecar().Done():
				return
			case <-time.After(100 * time.Millisecond): // the sidecar restarts its API: try again
			}
		}
	}()
}

func (r *recorder) deliver(worker string, e api.Event) {
	ids := make([]string, len(e.Generation.Members))
	for i, m := range e.Generation.Members {
		ids[i] = m.ID
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Deliveries = append(r.h.Deliveries, Delivery{Worker: worker, Number: e.Generation.Generation, Members: ids,
		Sent: e.Time, Received: time.Now()})
	r.notify()
}

// view is what the harness asks the recorder between events.
type view struct {
	latest  Commit
	leader  string
	changed <-chan struct{}
	// stepped is, per worker, when it first stepped in generation latest
	// after since (absent: not yet).
	stepped map[string]time.Time
	started map[string]bool // trainer printed a line
}

// look returns the recorder's view; since bounds the steps it counts.
func (r *recorder) look(since time.Time) view {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := view{leader: r.leaderLocked(), changed: r.changed, stepped: map[string]time.Time{}, started: map[string]bool{}}
	for id := range r.first {
		v.started[id] = true
	}
	if n := len(r.h.Commits); n > 0 {
		v.latest = r.h.Commits[n-1]
	}
	for i := len(r.h.Steps) - 1; i >= 0; i-- {
		s := r.h.Steps[i]
		if s.At.Before(since.Add(-time.Second)) {
			break // lines come in about the order they were printed
		}
		if !s.At.After(since) {
			continue
		}
		if s.Generation == v.latest.Number {
			v.stepped[s.Worker] = s.At
		}
	}
	return v
}

// edit changes the history under the recorder's lock.
func (r *recorder) edit(f func(h *History)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.h)
	r.notify()
}
