package record

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDecodeMember(t *testing.T) {
	tests := []struct {
		name, key, value string
		wantErr          string // "" for a valid record
	}{
		{"a valid record", "/ringside/default/j/members/w0", `{"id":"w0","addr":"10.0.0.1","slots":2,"state":"active"}`, ""},
		{"a pending record", "members/w0", `{"id":"w0","addr":"10.0.0.1","slots":1,"state":"pending"}`, ""},
		{"not JSON", "members/w0", `not json`, "malformed member: invalid character"},
		{"an id that is not the key's", "members/w0", `{"id":"w9","addr":"x","slots":1,"state":"active"}`, `id "w9" does not match the key`},
		{"an empty record names every problem", "members/w0", `{}`, "malformed member: id is empty\naddr is empty\nslots must be at least 1, got 0\nstate \"\" is not \"active\", \"draining\" or \"pending\""},
		{"an id with a slash", "members/a/b", `{"id":"a/b","addr":"x","slots":1,"state":"active"}`, "contains '/'"},
		{"a state of the status view is no registration", "members/w0", `{"id":"w0","addr":"x","slots":1,"state":"gone"}`, `state "gone" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := DecodeMember(tt.key, []byte(tt.value), 0)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("DecodeMember: %v", err)
			case tt.wantErr == "" && info.ID != "w0":
				t.Fatalf("decoded %+v", info)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("DecodeMember = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeGeneration(t *testing.T) {
	tests := []struct {
		name, value string
		wantErr     string
	}{
		{"ranks contiguous in ring order", `{"number":3,"members":[{"id":"b","rank":0,"slots":2},{"id":"a","rank":2,"slots":1}],"world_size":3}`, ""},
		{"no members", `{"number":1,"members":[],"world_size":0}`, ""},
		{"not JSON", `{"number":`, "malformed generation: unexpected end of JSON input"},
		{"number zero", `{"number":0}`, "malformed generation: number 0 is not positive"},
		{"a member without id", `{"number":2,"members":[{"rank":0,"slots":1}],"world_size":1}`, "malformed generation 2: a member has no id"},
		{"a member twice", `{"number":2,"members":[{"id":"a","rank":0,"slots":1},{"id":"a","rank":1,"slots":1}],"world_size":2}`, `member "a" appears twice`},
		{"a member without slots", `{"number":2,"members":[{"id":"a","rank":0,"slots":0}],"world_size":0}`, `member "a" has 0 slots`},
		{"a gap in the ranks", `{"number":2,"members":[{"id":"a","rank":0,"slots":1},{"id":"b","rank":2,"slots":1}],"world_size":3}`, `member "b" has rank 2, want 1`},
		{"a world size the members do not hold", `{"number":2,"members":[{"id":"a","rank":0,"slots":1}],"world_size":4}`, "world size 4, but the members hold 1 ranks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := DecodeGeneration([]byte(tt.value))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeGeneration = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.index == nil {
				t.Fatal("decoded generation has no index: sharing it would race")
			}
			for i, id := range g.IDs() {
				if m, ok := g.Member(id); !ok || m.ID != id || g.Members[i].ID != id {
					t.Fatalf("Member(%q) = %+v, %v", id, m, ok)
				}
			}
			if _, ok := g.Member("nobody"); ok {
				t.Fatal("Member found an id that is not in the generation")
			}
		})
	}
}

func TestDecodeStatus(t *testing.T) {
	st, err := DecodeStatus([]byte(`{"step":12,"samples_per_s":96.5,"step_time_p50_s":0.1,"time":"2026-01-02T03:04:05Z","future_field":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 12 || st.SamplesPerSec != 96.5 || !st.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("decoded %+v", st)
	}
	if _, err := DecodeStatus([]byte(`{"step":"many"}`)); err == nil || !strings.HasPrefix(err.Error(), "malformed status: ") {
		t.Fatalf("DecodeStatus of a bad step = %v, want a malformed status error", err)
	}
}

// TestStateStringsNeverChange pins the strings stored in etcd and sent to
// trainers: the Python client and stored values compare them.
func TestStateStringsNeverChange(t *testing.T) {
	want := map[State]string{
		StateActive: "active", StateDraining: "draining", StatePending: "pending",
		StateStandby: "standby", StatePaused: "paused", StateExcluded: "excluded",
		StateWaiting: "waiting", StateGone: "gone", StateUnknown: "unknown",
	}
	for s, str := range want {
		b, err := json.Marshal(s)
		if err != nil || string(b) != `"`+str+`"` {
			t.Errorf("%s encodes as %s, want %q", s, b, str)
		}
		registration := s == StateActive || s == StateDraining || s == StatePending
		if s.Registered() != registration {
			t.Errorf("%s.Registered() = %v, want %v", s, s.Registered(), registration)
		}
	}
}

func TestPrefix(t *testing.T) {
	if got := Prefix("default", "llama") + MembersDir + "w0"; got != "/ringside/default/llama/members/w0" {
		t.Fatalf("member key %q", got)
	}
}

func TestDecodeVote(t *testing.T) {
	target, voter, v, err := DecodeVote(VoteKey("w-1", "w-2"), []byte(`{"lease":42}`))
	if err != nil || target != "w-1" || voter != "w-2" || v.Lease != 42 {
		t.Fatalf("DecodeVote = %q, %q, %+v, %v; want w-1, w-2, lease 42", target, voter, v, err)
	}
	for _, tc := range []struct{ key, value string }{
		{"suspects/w-1", `{"lease":42}`},
		{"suspects//w-2", `{"lease":42}`},
		{"suspects/w-1/w-2/x", `{"lease":42}`},
		{"members/w-1/w-2", `{"lease":42}`},
		{VoteKey("w-1", "w-2"), `{"lease":0}`},
		{VoteKey("w-1", "w-2"), `not json`},
	} {
		if _, _, _, err := DecodeVote(tc.key, []byte(tc.value)); err == nil {
			t.Errorf("DecodeVote(%q, %q) accepted a malformed vote", tc.key, tc.value)
		}
	}
}

func TestRingNeighboursWrapAroundAndStopShortOfThemselves(t *testing.T) {
	g := &Generation{Members: []RankedMember{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	if got := g.Predecessors("a", 4); !slices.Equal(got, []string{"c", "b"}) {
		t.Errorf("Predecessors(a, 4) = %q, want [c b]", got)
	}
	if got := g.Successors("c", 1); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Successors(c, 1) = %q, want [a]", got)
	}
	if got := g.Successors("x", 2); got != nil {
		t.Errorf("Successors of a non-member = %q, want none", got)
	}
}
