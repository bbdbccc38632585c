package jobstatus

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
)

// Read returns the job's snapshot, built from one Get of its prefix. It
// blocks until etcd answers or ctx ends; bound ctx to fail fast when etcd is
// unreachable. Malformed values are reported in Snapshot.Warnings, never as
// an error.
func Read(ctx context.Context, client *clientv3.Client, namespace, job string) (Snapshot, error) {
	cfg := coordinator.DefaultConfig(namespace, job)
	if err := cfg.Validate(); err != nil {
		return Snapshot{}, fmt.Errorf("jobstatus: %w", err)
	}
	prefix := cfg.Prefix()
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, fmt.Errorf("read %s: %w", prefix, err)
	}
	s := parse(prefix, resp.Kvs).snapshot(time.Now())
	s.Namespace, s.Job, s.Revision = namespace, job, resp.Header.Revision
	return s, nil
}

// contents is what parse found under a job's prefix.
type contents struct {
	gen        *coordinator.Generation
	registered []coordinator.MemberInfo // valid members/ values, in join order
	malformed  map[string]bool          // ids whose members/ value is malformed
	beats      map[string]heartbeat
	leader     string
	leaderRev  int64
	warnings   []string
}

// heartbeat is the part of sidecar.Status (status/<id>) a snapshot shows.
type heartbeat struct {
	Step          int64     `json:"step"`
	SamplesPerSec float64   `json:"samples_per_s"`
	StepTimeP50S  float64   `json:"step_time_p50_s"`
	Time          time.Time `json:"time"`
}

// parse sorts the job's keys by kind. Keys it does not know are ignored, so
// an older reader keeps working when the key space grows.
func parse(prefix string, kvs []*mvccpb.KeyValue) *contents {
	c := &contents{malformed: map[string]bool{}, beats: map[string]heartbeat{}}
	for _, kv := range kvs {
		key := string(kv.Key)
		rel := strings.TrimPrefix(key, prefix)
		var err error
		switch kind, id, _ := strings.Cut(rel, "/"); {
		case rel == "generation":
			c.gen, err = decodeGeneration(kv.Value)
		case kind == "members":
			err = c.addMember(id, kv)
		case kind == "status":
			err = c.addHeartbeat(id, kv.Value)
		case kind == "election" && len(kv.Value) > 0:
			if c.leader == "" || kv.CreateRevision < c.leaderRev {
				c.leader, c.leaderRev = string(kv.Value), kv.CreateRevision
			}
		}
		if err != nil {
			c.warnings = append(c.warnings, fmt.Sprintf("%s: %v", key, err))
		}
	}
	slices.SortStableFunc(c.registered, func(a, b coordinator.MemberInfo) int {
		return cmp.Compare(a.JoinRevision, b.JoinRevision)
	})
	return c
}

func (c *contents) addMember(id string, kv *mvccpb.KeyValue) error {
	var info coordinator.MemberInfo
	err := json.Unmarshal(kv.Value, &info)
	if err == nil {
		err = info.Validate()
	}
	if err == nil && info.ID != id {
		err = fmt.Errorf("id %q does not match the key", info.ID)
	}
	if err != nil {
		c.malformed[id] = true
		return fmt.Errorf("malformed member: %w", err)
	}
	info.JoinRevision = kv.CreateRevision
	c.registered = append(c.registered, info)
	return nil
}

func (c *contents) addHeartbeat(id string, value []byte) error {
	var hb heartbeat
	if err := json.Unmarshal(value, &hb); err != nil {
		return fmt.Errorf("malformed status: %w", err)
	}
	c.beats[id] = hb
	return nil
}

// decodeGeneration checks what a snapshot relies on: a positive number and
// members that can be told apart.
func decodeGeneration(value []byte) (*coordinator.Generation, error) {
	var g coordinator.Generation
	if err := json.Unmarshal(value, &g); err != nil {
		return nil, fmt.Errorf("malformed generation: %w", err)
	}
	if g.Number < 1 {
		return nil, fmt.Errorf("malformed generation: number %d is not positive", g.Number)
	}
	seen := make(map[string]bool, len(g.Members))
	for _, m := range g.Members {
		if m.ID == "" || seen[m.ID] {
			return nil, fmt.Errorf("malformed generation %d: member id %q is empty or repeated", g.Number, m.ID)
		}
		seen[m.ID] = true
	}
	return &g, nil
}

// snapshot assembles the rows: the generation's members in ring order,
// then the registered members outside it, except the standby ones.
func (c *contents) snapshot(now time.Time) Snapshot {
	s := Snapshot{Time: now, Leader: c.leader, Warnings: c.warnings, Members: []Member{}}
	byID := make(map[string]coordinator.MemberInfo, len(c.registered))
	for _, info := range c.registered {
		byID[info.ID] = info
	}
	placed := map[string]bool{}
	if g := c.gen; g != nil {
		s.Generation, s.Paused, s.Reason, s.CommittedBy = g.Number, g.Paused, g.Reason, g.Leader
		s.WorldSize, s.Standby = g.WorldSize, g.Standby
		if g.MasterAddr != "" {
			s.Master = net.JoinHostPort(g.MasterAddr, strconv.Itoa(g.MasterPort))
		}
		for _, rm := range g.Members {
			placed[rm.ID] = true
			m := Member{ID: rm.ID, Addr: rm.Addr, Rank: rm.Rank, Slots: rm.Slots, State: c.ringState(rm.ID, byID)}
			s.Members = append(s.Members, c.withHeartbeat(m, now))
			s.Totals.SamplesPerSec += s.Members[len(s.Members)-1].SamplesPerSec
		}
		for _, id := range g.Standby {
			placed[id] = true
		}
	}
	for _, info := range c.registered {
		if placed[info.ID] {
			continue
		}
		m := Member{ID: info.ID, Addr: info.Addr, Rank: -1, Slots: info.Slots, State: StateWaiting}
		if info.State == coordinator.StateDraining {
			m.State = StateDraining
		}
		s.Members = append(s.Members, c.withHeartbeat(m, now))
	}
	return s
}

// ringState is the state of a member of the generation.
func (c *contents) ringState(id string, byID map[string]coordinator.MemberInfo) State {
	info, ok := byID[id]
	switch {
	case ok && info.State == coordinator.StateDraining:
		return StateDraining
	case ok:
		return StateActive
	case c.malformed[id]:
		return StateUnknown
	}
	return StateGone
}

func (c *contents) withHeartbeat(m Member, now time.Time) Member {
	hb, ok := c.beats[m.ID]
	if !ok {
		return m
	}
	m.Step, m.SamplesPerSec, m.StepTimeP50S = hb.Step, hb.SamplesPerSec, hb.StepTimeP50S
	if !hb.Time.IsZero() {
		// Clamped at 0: the sidecar's clock may run a little ahead of ours.
		age := math.Round(max(now.Sub(hb.Time).Seconds(), 0)*1000) / 1000
		m.LastHeartbeatAgeS = &age
	}
	return m
}
