package record

import (
	"fmt"
	"strings"
	"testing"
)

func TestDecodeMemberBoundsEveryValue(t *testing.T) {
	valid := `"id":"w0","addr":"10.0.0.1","state":"active"`
	tests := []struct {
		name, fields string
		wantErr      string
	}{
		{"slots 1e18 is no integer", `"slots":1e18`, "cannot unmarshal"},
		{"a huge integer of slots", `"slots":9223372036854775807`, "slots 9223372036854775807 is more than 65536"},
		{"a world of slots too many", `"slots":65537`, "more than 65536"},
		{"slots past int64", `"slots":99999999999999999999`, "cannot unmarshal"},
		{"the most slots", `"slots":65536`, ""},
		{"a gossip address without a port", `"slots":1,"gossip_addr":"10.0.0.1"`, "gossip_addr"},
		{"a gossip port 0", `"slots":1,"gossip_addr":"10.0.0.1:0"`, "port \"0\" is not in 1-65535"},
		{"a gossip port past 65535", `"slots":1,"gossip_addr":"10.0.0.1:65536"`, "is not in 1-65535"},
		{"a gossip host that is none", `"slots":1,"gossip_addr":"evil host:7946"`, "neither an IP address nor a DNS name"},
		{"a gossip address by name", `"slots":1,"gossip_addr":"w0.job.svc:7946"`, ""},
		{"an IPv6 gossip address", `"slots":1,"gossip_addr":"[fd00::1]:7946"`, ""},
		{"an incarnation below zero", `"slots":1,"incarnation":-1`, "incarnation -1"},
		{"a topology too deep", `"slots":1,"topology":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 17), ",") + `]`, "17 levels"},
		{"a topology level too long", `"slots":1,"topology":["` + strings.Repeat("x", 300) + `"]`, "a topology level is 300 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMember("members/w0", []byte("{"+valid+","+tt.fields+"}"), 1)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeMember: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DecodeMember = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
	for _, tc := range []struct{ addr, wantErr string }{
		{"bad host!", "neither an IP"}, {strings.Repeat("a", 254), "more than 253"}, {"-x.example", "neither"}, {"10.0.0.1:80", "neither"},
	} {
		_, err := DecodeMember("members/w0", []byte(fmt.Sprintf(`{"id":"w0","addr":%q,"slots":1,"state":"active"}`, tc.addr)), 1)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("addr %q: %v, want an error with %q", tc.addr, err, tc.wantErr)
		}
	}
	long := strings.Repeat("w", MaxIDLen+1)
	if _, err := DecodeMember("members/"+long, []byte(fmt.Sprintf(`{"id":%q,"addr":"a","slots":1,"state":"active"}`, long)), 1); err == nil {
		t.Error("an id past MaxIDLen was taken")
	}
}

// TestAWorldSizeThatWouldOverflowIsRefused: members whose slots sum past
// int64 (world_size -9223372036854775807 before the bounds) never decode.
func TestAWorldSizeThatWouldOverflowIsRefused(t *testing.T) {
	const half = 1 << 62
	value := fmt.Sprintf(`{"number":2,"members":[{"id":"a","rank":0,"slots":%d},{"id":"b","rank":%d,"slots":%d},{"id":"c","rank":%d,"slots":1}],"world_size":%d}`,
		int64(half), int64(half), int64(half), int64(-1<<63), int64(-1<<63+1))
	if _, err := DecodeGeneration([]byte(value)); err == nil || !strings.Contains(err.Error(), "slots") {
		t.Fatalf("DecodeGeneration = %v, want the slots refused", err)
	}
}

func TestDecodeGenerationBoundsEveryValue(t *testing.T) {
	member := `{"id":"a","addr":"10.0.0.1","rank":0,"slots":1}`
	tests := []struct {
		name, value, wantErr string
	}{
		{"a number past the bound", `{"number":9223372036854775807,"members":[],"world_size":0}`, "more than"},
		{"a master port past 65535", `{"number":1,"members":[` + member + `],"world_size":1,"master_addr":"10.0.0.1","master_port":70000}`, "master port 70000"},
		{"a master address that is none", `{"number":1,"members":[` + member + `],"world_size":1,"master_addr":"a b","master_port":29500}`, "master_addr"},
		{"a member address that is none", `{"number":1,"members":[{"id":"a","addr":"x/y","rank":0,"slots":1}],"world_size":1}`, `member "a" addr`},
		{"a member of too many slots", `{"number":1,"members":[{"id":"a","rank":0,"slots":9223372036854775807}],"world_size":9223372036854775807}`, `has 9223372036854775807 slots`},
		{"a standby id with a slash", `{"number":1,"members":[],"standby":["a/b"],"world_size":0}`, "standby"},
		{"a store token that is not hex", `{"number":1,"members":[],"world_size":0,"store_token":"zz"}`, "not hex"},
		{"a good one", `{"number":1,"members":[` + member + `],"world_size":1,"master_addr":"10.0.0.1","master_port":29501,"store_token":"00ff"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeGeneration([]byte(tt.value))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("DecodeGeneration = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeStatusBoundsEveryValue(t *testing.T) {
	for _, v := range []string{`{"step":-1}`, `{"samples_per_s":-3}`, `{"generation":-2}`, `{"step_time_p90_s":-0.5}`} {
		if _, err := DecodeStatus([]byte(v)); err == nil {
			t.Errorf("DecodeStatus(%s) accepted it", v)
		}
	}
}

func TestKindOf(t *testing.T) {
	for key, want := range map[string]string{
		"/ringside/ns/job/members/w0":      "member",
		"members/w0":                       "member",
		"/ringside/ns/job/generation":      "generation",
		"/ringside/ns/job/suspects/a/b":    "vote",
		"/ringside/ns/job/status/w0":       "status",
		"/ringside/ns/job/evicted/w0":      "eviction",
		"/ringside/ns/job/crashes/w0":      "crash",
		"/ringside/ns/job/election/abc":    "other",
		"/ringside/ns/job/members-like/w0": "other",
	} {
		if got := KindOf(key); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", key, got, want)
		}
	}
}
