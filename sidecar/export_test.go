package sidecar

import (
	"context"
	"github.com/ringside/ringside/sidecar/gossip"
	"log/slog"
	"net/http"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ringside/ringside/coordinator/record"
)

// NewFixedAgent returns an agent that never joins a job and holds g (nil:
// none yet) as if it had been committed, and its trainer API. The API
// answers everything that needs no etcd, so tests can pin those answers.
func NewFixedAgent(cfg Config, g *record.Generation, nccl map[string]string) (*Agent, http.Handler, error) {
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	a.gen, a.nccl = g, nccl
	h := a.handler()
	// Requests come from this process, as the pod's trainer.
	self := caller{cred: &unix.Ucred{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}}
	return a, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, self)))
	}), nil
}

// AnnounceDrain starts the drain's announcement, as a drain does first.
func (a *Agent) AnnounceDrain(reason string) { a.announceDrain(reason) }

// AnnounceDead announces member's death, as a confirmed death does first.
func (a *Agent) AnnounceDead(member string) { a.detect.publishDead(member) }

// AnnounceStop announces the job's stop of g, as its hand-over does.
func (a *Agent) AnnounceStop(g *record.Generation) {
	if e, ok := stopEvent(g); ok {
		a.publish(e)
	}
}

// GossipKeys returns the gossip keyring in use, the primary key first.
func (a *Agent) GossipKeys() [][]byte { return a.gossip.Keys() }

// GossipMembers returns how many members this agent's gossip holds alive.
func (a *Agent) GossipMembers() int { return a.gossip.Members() }

// CheckGossip pings member over gossip once and reports whether it answered.
func (a *Agent) CheckGossip(ctx context.Context, member string) (bool, error) {
	st, err := a.gossip.Check(ctx, member)
	return st == gossip.Answered, err
}

// GenerationNumber returns the number of the generation the agent holds (0:
// none).
func (a *Agent) GenerationNumber() int64 {
	n, _ := a.GenerationSize()
	return n
}

// GenerationSize returns the number and the world size of the generation
// the agent holds (0, 0: none).
func (a *Agent) GenerationSize() (number int64, worldSize int) {
	g, _ := a.generation()
	if g == nil {
		return 0, 0
	}
	return g.Number, g.WorldSize
}
