package autoscale

import (
	"slices"
	"sync"
	"time"
)

// history keeps, per ElasticScaler key, the recommendations and scale
// changes of the recent past that Decide's stabilization windows and
// policies look back on, in memory as the HorizontalPodAutoscaler does: a
// new leader starts with none, and so decides as if the last hour were
// quiet.
type history struct {
	// maxAge and maxLen bound each list: entries older than maxAge or
	// beyond the newest maxLen are dropped.
	maxAge time.Duration
	maxLen int

	mu  sync.Mutex
	per map[string]*scalerHistory
}

type scalerHistory struct {
	recs    []Recommendation
	changes []Change
	// generation is the job's newest generation seen, first seen at
	// generationSince.
	generation      int64
	generationSince time.Time
}

func newHistory(maxAge time.Duration, maxLen int) *history {
	return &history{maxAge: maxAge, maxLen: maxLen, per: map[string]*scalerHistory{}}
}

// get returns copies of key's lists, pruned at now.
func (h *history) get(key string, now time.Time) ([]Recommendation, []Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.per[key]
	if s == nil {
		return nil, nil
	}
	h.prune(s, now)
	return slices.Clone(s.recs), slices.Clone(s.changes)
}

func (h *history) addRecommendation(key string, r Recommendation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.scaler(key)
	s.recs = append(s.recs, r)
	h.prune(s, r.Time)
}

func (h *history) addChange(key string, c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.scaler(key)
	s.changes = append(s.changes, c)
	h.prune(s, c.Time)
}

// generationAge returns how long key's job has been at generation, as
// this controller has seen it: from the first sync that saw it.
func (h *history) generationAge(key string, generation int64, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.scaler(key)
	if s.generation != generation {
		s.generation, s.generationSince = generation, now
	}
	return now.Sub(s.generationSince)
}

// forget drops key's lists (its scaler was deleted).
func (h *history) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.per, key)
}

func (h *history) scaler(key string) *scalerHistory {
	s := h.per[key]
	if s == nil {
		s = &scalerHistory{}
		h.per[key] = s
	}
	return s
}

func (h *history) prune(s *scalerHistory, now time.Time) {
	cutoff := now.Add(-h.maxAge)
	s.recs = keepRecent(s.recs, h.maxLen, func(r Recommendation) bool { return r.Time.Before(cutoff) })
	s.changes = keepRecent(s.changes, h.maxLen, func(c Change) bool { return c.Time.Before(cutoff) })
}

// keepRecent drops the entries that are old, then all but the newest n.
func keepRecent[T any](list []T, n int, old func(T) bool) []T {
	list = slices.DeleteFunc(list, old)
	if len(list) > n {
		list = slices.Delete(list, 0, len(list)-n)
	}
	return list
}
