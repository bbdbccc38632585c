package sidecar

import (
	"log/slog"
	"net/http"

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
	return a, a.handler(), nil
}

// AnnounceDrain starts the drain's announcement, as a drain does first.
func (a *Agent) AnnounceDrain(reason string) { a.announceDrain(reason) }

// AnnounceDead announces member's death, as a confirmed death does first.
func (a *Agent) AnnounceDead(member string) { a.publishDead(member) }
