package coordinator

import (
	"encoding/json"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

func TestLeaderIgnoresItsOwnEarlierCommitDeliveredLate(t *testing.T) {
	j, _ := testJob(t)
	a := join(t, j, "a")
	gen := func(n int64) *record.Generation {
		g := &record.Generation{Number: n, WorldSize: 1, Members: []record.RankedMember{{ID: "a", Addr: "10.0.0.a", Slots: 1}}}
		g.BuildIndex()
		return g
	}
	put := func(g *record.Generation, rev int64) *clientv3.Event {
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(j.genKey()), Value: b, ModRevision: rev}}
	}
	tests := []struct {
		name    string
		events  []*clientv3.Event
		wantNum int64
		wantRev int64
	}{
		{
			// Two commits (rev 90, then 100) before the watch delivered the
			// first one.
			name:    "an own commit delivered after a later one is ignored",
			events:  []*clientv3.Event{put(gen(4), 90)},
			wantNum: 5, wantRev: 100,
		},
		{
			name:    "a foreign write after ours is taken",
			events:  []*clientv3.Event{put(gen(4), 90), put(gen(9), 120)},
			wantNum: 9, wantRev: 120,
		},
		{
			name: "a deleted key keeps the known generation so numbers keep growing",
			events: []*clientv3.Event{{Type: clientv3.EventTypeDelete,
				Kv: &mvccpb.KeyValue{Key: []byte(j.genKey()), ModRevision: 130}}},
			wantNum: 5, wantRev: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &leaderState{gen: gen(5), genRev: 100}
			a.applyGenerationEvents(st, tt.events)
			if st.gen.Number != tt.wantNum || st.genRev != tt.wantRev {
				t.Fatalf("leader holds generation %d at revision %d, want %d at %d", st.gen.Number, st.genRev, tt.wantNum, tt.wantRev)
			}
		})
	}
}
