package sidecar_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar/sidecartest"
)

// sampleValue reads one sample of a counter or gauge vector from g (0
// when it is not there).
func sampleValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != label || l.GetValue() != value {
					continue
				}
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestOutOfBoundsValuesInEtcdAreIgnoredAndCounted writes what a holder of
// write access to the prefix could: members with slots 1e18, with the
// largest int64, with slots that would overflow the world size and with a
// gossip address that is none, and a generation whose slots overflow. The
// leader counts each under ringside_invalid_records_total and commits
// nothing with them; the members keep the generation they hold.
func TestOutOfBoundsValuesInEtcdAreIgnoredAndCounted(t *testing.T) {
	srv := etcdtest.Start(t)
	a := sidecartest.Start(t, srv.Endpoints(), "bounds", "w0")
	eventually(t, "a first generation", func() bool { return a.GenerationNumber() > 0 })
	gen := a.GenerationNumber()

	cli := etcdtest.Client(t, srv)
	prefix := record.Prefix("default", "bounds")
	ctx := context.Background()
	bad := map[string]string{
		"members/e18":    `{"id":"e18","addr":"127.0.0.9","slots":1e18,"state":"active"}`,
		"members/huge":   `{"id":"huge","addr":"127.0.0.9","slots":9223372036854775807,"state":"active"}`,
		"members/half":   `{"id":"half","addr":"127.0.0.9","slots":4611686018427387904,"state":"active"}`,
		"members/gossip": `{"id":"gossip","addr":"127.0.0.9","slots":1,"state":"active","gossip_addr":"nowhere"}`,
	}
	for key, value := range bad {
		if _, err := cli.Put(ctx, prefix+key, value); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the leader counts the four members", func() bool {
		return sampleValue(t, a.Gatherer(), "ringside_invalid_records_total", "kind", "member") >= float64(len(bad))
	})
	if _, err := cli.Put(ctx, prefix+record.GenerationKey,
		`{"number":99,"members":[{"id":"x","addr":"127.0.0.9","rank":0,"slots":4611686018427387904},{"id":"y","addr":"127.0.0.9","rank":4611686018427387904,"slots":4611686018427387904}],"world_size":-9223372036854775808}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the generation counted", func() bool {
		return sampleValue(t, a.Gatherer(), "ringside_invalid_records_total", "kind", "generation") >= 1
	})
	// The leader's next commit (the bad generation's ModRevision moved its
	// fence) must still hold w0 alone, numbered above what it held.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		r := a.GenerationNumber()
		if r < gen {
			t.Fatalf("generation went back from %d to %d", gen, r)
		}
		time.Sleep(50 * time.Millisecond) // watching for a commit that must not take them
	}
	resp, err := cli.Get(ctx, prefix+record.GenerationKey)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := record.DecodeGeneration(resp.Kvs[0].Value); err == nil {
		for _, m := range g.Members {
			if m.ID != "w0" {
				t.Fatalf("generation %d holds %s", g.Number, m.ID)
			}
		}
	}
}
