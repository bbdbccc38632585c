package jobstatus

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// FuzzSnapshot builds `ringside status` from any three keys and values
// under a job's prefix (what anyone with write access could store) and
// renders it in both formats: nothing may panic, the JSON must be valid,
// and a control character stored in a value never reaches the terminal.
func FuzzSnapshot(f *testing.F) {
	f.Add("generation", []byte(`{"number":2,"members":[{"id":"w0","addr":"10.0.0.1","rank":0,"slots":2}],"world_size":2,"master_addr":"10.0.0.1","master_port":29502,"store_token":"00ff","leader":"w0"}`),
		"members/w0", []byte(`{"id":"w0","addr":"10.0.0.1","slots":2,"state":"active"}`),
		"status/w0", []byte(`{"step":12,"samples_per_s":96.5,"time":"2026-01-02T03:04:05Z"}`))
	f.Add("election/694d", []byte("w0\x1b[2J"), "members/w1", []byte(`{"id":"w1","addr":"x","slots":1e18,"state":"active"}`),
		"status/w1", []byte(`{"step":-5}`))
	const prefix = "/ringside/default/j/"
	now := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, k3 string, v3 []byte) {
		kvs := []*mvccpb.KeyValue{
			{Key: []byte(prefix + k1), Value: v1, CreateRevision: 3},
			{Key: []byte(prefix + k2), Value: v2, CreateRevision: 4},
			{Key: []byte(prefix + k3), Value: v3, CreateRevision: 5},
		}
		s := parse(prefix, kvs).snapshot(now)
		var text bytes.Buffer
		if err := Render(&text, s, RenderOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, m := range s.Members {
			if strings.ContainsAny(m.ID+m.Addr, "\x1b\r") {
				t.Fatalf("a member row holds a control character: %+v", m)
			}
		}
		if strings.ContainsAny(s.Leader+s.CommittedBy, "\x1b\r\n") {
			t.Fatalf("leader %q / committed by %q holds a control character", s.Leader, s.CommittedBy)
		}
		var js bytes.Buffer
		if err := NewPrinter(&js, true).Once(s); err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(js.Bytes(), &back); err != nil {
			t.Fatalf("status JSON %q: %v", js.Bytes(), err)
		}
	})
}
