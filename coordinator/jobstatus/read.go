package jobstatus

import (
	"cmp"
	"context"
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
	"github.com/ringside/ringside/coordinator/record"
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
	gen        *record.Generation
	registered []record.MemberInfo // valid members/ values, in join order
	malformed  map[string]bool     // ids whose members/ value is malformed
	beats      map[string]record.Status
	finished   map[string]int64 // generation each member's trainer finished in
	stragglers []Straggler
	drains     []float64
	leader     string
	leaderRev  int64
	warnings   []string
}

// parse sorts the job's keys by kind. Keys it does not know are ignored, so
// an older reader keeps working when the key space grows.
func parse(prefix string, kvs []*mvccpb.KeyValue) *contents {
	c := &contents{malformed: map[string]bool{}, beats: map[string]record.Status{}, finished: map[string]int64{}}
	for _, kv := range kvs {
		key := string(kv.Key)
		rel := strings.TrimPrefix(key, prefix)
		var err error
		switch {
		case rel == record.GenerationKey:
			c.gen, err = record.DecodeGeneration(kv.Value)
		case rel == record.DrainsKey:
			var d record.Drains
			d, err = record.DecodeDrains(kv.Value)
			c.drains = d.Seconds
		case strings.HasPrefix(rel, record.MembersDir):
			err = c.addMember(strings.TrimPrefix(rel, record.MembersDir), kv)
		case strings.HasPrefix(rel, record.CrashesDir):
			var id string
			var cr record.Crash
			if id, cr, err = record.DecodeCrash(rel, kv.Value); err == nil && cr.Finished {
				c.finished[id] = cr.Generation
			}
		case strings.HasPrefix(rel, record.StatusDir):
			err = c.addHeartbeat(strings.TrimPrefix(rel, record.StatusDir), kv.Value)
		case strings.HasPrefix(rel, record.StragglersDir):
			var f Straggler
			if f.Member, f.Straggler, err = record.DecodeStraggler(rel, kv.Value); err == nil {
				c.stragglers = append(c.stragglers, f)
			}
		case strings.HasPrefix(rel, record.ElectionDir) && len(kv.Value) > 0:
			if err = record.ValidateID(string(kv.Value)); err != nil {
				err = fmt.Errorf("malformed leader campaign: %w", err)
				break
			}
			if c.leader == "" || kv.CreateRevision < c.leaderRev {
				c.leader, c.leaderRev = string(kv.Value), kv.CreateRevision
			}
		}
		if err != nil {
			c.warnings = append(c.warnings, fmt.Sprintf("%s: %v", key, err))
		}
	}
	slices.SortStableFunc(c.registered, func(a, b record.MemberInfo) int {
		return cmp.Compare(a.JoinRevision, b.JoinRevision)
	})
	return c
}

func (c *contents) addMember(id string, kv *mvccpb.KeyValue) error {
	info, err := record.DecodeMember(string(kv.Key), kv.Value, kv.CreateRevision)
	if err != nil {
		c.malformed[id] = true
		return err
	}
	c.registered = append(c.registered, info)
	return nil
}

func (c *contents) addHeartbeat(id string, value []byte) error {
	st, err := record.DecodeStatus(value)
	if err != nil {
		return err
	}
	c.beats[id] = st
	return nil
}

// snapshot assembles the rows: the generation's members in ring order,
// then the registered members outside it, except the standby ones.
func (c *contents) snapshot(now time.Time) Snapshot {
	s := Snapshot{Time: now, Leader: c.leader, Warnings: c.warnings, Members: []Member{}, Stragglers: c.stragglers, DrainSeconds: c.drains}
	byID := make(map[string]record.MemberInfo, len(c.registered))
	for _, info := range c.registered {
		byID[info.ID] = info
	}
	placed := map[string]bool{}
	if g := c.gen; g != nil {
		s.Generation, s.Paused, s.Reason, s.CommittedBy = g.Number, g.Paused, g.Reason, g.Leader
		s.Restarts = g.Restarts
		if g.Stop != nil {
			s.Stopped = g.Stop.Message
		}
		s.WorldSize, s.Standby = g.WorldSize, g.Standby
		if g.MasterAddr != "" {
			s.Master = net.JoinHostPort(g.MasterAddr, strconv.Itoa(g.MasterPort))
		}
		for _, rm := range g.Members {
			if c.finished[rm.ID] == g.Number {
				s.Finished = append(s.Finished, rm.ID)
			}
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
		m := Member{ID: info.ID, Addr: info.Addr, Rank: -1, Slots: info.Slots, State: record.StateWaiting}
		if info.State == record.StateDraining {
			m.State = record.StateDraining
		}
		s.Members = append(s.Members, c.withHeartbeat(m, now))
	}
	return s
}

// ringState is the state of a member of the generation.
func (c *contents) ringState(id string, byID map[string]record.MemberInfo) record.State {
	info, ok := byID[id]
	switch {
	case ok && info.State == record.StateDraining:
		return record.StateDraining
	case ok:
		return record.StateActive
	case c.malformed[id]:
		return record.StateUnknown
	}
	return record.StateGone
}

func (c *contents) withHeartbeat(m Member, now time.Time) Member {
	hb, ok := c.beats[m.ID]
	if !ok {
		return m
	}
	m.Step, m.SamplesPerSec, m.StepTimeP50S = hb.Step, hb.SamplesPerSec, hb.StepTimeP50S
	m.HeartbeatGeneration, m.GNS = hb.Generation, hb.GNS
	m.ComputeTimeS, m.WaitTimeS = hb.ComputeTimeS, hb.WaitTimeS
	if !hb.Time.IsZero() {
		// Clamped at 0: the sidecar's clock may run a little ahead of ours.
		age := math.Round(max(now.Sub(hb.Time).Seconds(), 0)*1000) / 1000
		m.LastHeartbeatAgeS = &age
	}
	return m
}
