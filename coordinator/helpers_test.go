package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testJob starts an embedded etcd and a job on it with a fast config.
func testJob(t *testing.T, mutate ...func(*Config)) (*Job, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	return newTestJob(t, client, mutate...), client
}

func newTestJob(t *testing.T, client *clientv3.Client, mutate ...func(*Config)) *Job {
	t.Helper()
	cfg := DefaultConfig("default", "test")
	cfg.TTL = 2 * time.Second
	cfg.Settle = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, f := range mutate {
		f(&cfg)
	}
	j, err := NewJob(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Close)
	return j
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(b)))
	return len(b), nil
}

func join(t *testing.T, j *Job, id string, mutate ...func(*record.MemberInfo)) *Member {
	t.Helper()
	info := record.MemberInfo{ID: id, Addr: "10.0.0." + id, Slots: 1}
	for _, f := range mutate {
		f(&info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := j.Join(ctx, info)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	t.Cleanup(m.Close)
	return m
}

// await reads m's generations until one satisfies ok, failing the test
// after 15 s.
func await(t *testing.T, m *Member, what string, ok func(*record.Generation) bool) *record.Generation {
	t.Helper()
	timeout := time.After(15 * time.Second)
	var last *record.Generation
	for {
		select {
		case g, open := <-m.Generations():
			if !open {
				t.Fatalf("%s: member %s stopped while waiting", what, m.ID())
			}
			last = g
			if ok(g) {
				return g
			}
		case <-timeout:
			t.Fatalf("%s: not seen by %s within 15s; last generation: %+v", what, m.ID(), last)
		}
	}
}

// hasIDs matches a generation whose members are exactly ids, in any order.
func hasIDs(ids ...string) func(*record.Generation) bool {
	want := slices.Sorted(slices.Values(ids))
	return func(g *record.Generation) bool {
		return slices.Equal(slices.Sorted(slices.Values(g.IDs())), want)
	}
}

func leaderOf(t *testing.T, ms ...*Member) *Member {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if m.IsLeader() {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a flag, not waiting for time to pass
	}
	t.Fatal("no leader elected within 15s")
	return nil
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// warnLogger logs warnings and errors to w, for tests that assert on them.
func warnLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
