package record

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The decoders of the key space take whatever anyone with write access to
// the prefix stored. Each fuzz target checks that a decoder never panics,
// and that what it accepts keeps its promises and survives a round trip.

func FuzzDecodeMember(f *testing.F) {
	f.Add("/ringside/default/j/members/w0", []byte(`{"id":"w0","addr":"10.0.0.1","slots":2,"state":"active","gossip_addr":"10.0.0.1:7946","topology":["z","r"]}`))
	f.Add("members/w0", []byte(`{"id":"w0","addr":"10.0.0.1","slots":1e18,"state":"active"}`))
	f.Add("members/w0", []byte(`{"id":"w0","addr":"w0.svc","slots":9223372036854775807,"state":"pending"}`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		info, err := DecodeMember(key, value, 7)
		if err != nil {
			return
		}
		if info.Slots < 1 || info.Slots > MaxSlots || ValidateID(info.ID) != nil || ValidateHost(info.Addr) != nil {
			t.Fatalf("accepted out-of-bounds member %+v", info)
		}
		if info.GossipAddr != "" && ValidateHostPort(info.GossipAddr) != nil {
			t.Fatalf("accepted gossip address %q", info.GossipAddr)
		}
		b, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMember(key, b, 7)
		if err != nil || !cmp.Equal(info, again, cmpopts.EquateEmpty()) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", info, b, again, err)
		}
	})
}

func FuzzDecodeGeneration(f *testing.F) {
	f.Add([]byte(`{"number":3,"members":[{"id":"b","addr":"10.0.0.2","rank":0,"slots":2},{"id":"a","addr":"10.0.0.1","rank":2,"slots":1}],"world_size":3,"master_addr":"10.0.0.2","master_port":29503,"store_token":"00ff"}`))
	f.Add([]byte(`{"number":1,"members":[],"world_size":0}`))
	f.Add([]byte(`{"number":9,"members":[{"id":"a","addr":"10.0.0.1","rank":0,"slots":1,"instance":"x"}],"world_size":1,"master_addr":"10.0.0.1","master_port":29509,"restarts":2,"failed_starts":3,"stop":{"message":"every worker exits 1 before its first step","exit_code":1,"crashed":["a"]}}`))
	f.Add([]byte(`{"number":2,"members":[{"id":"x","rank":0,"slots":4611686018427387904},{"id":"y","rank":4611686018427387904,"slots":4611686018427387904}],"world_size":-9223372036854775808}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		g, err := DecodeGeneration(value)
		if err != nil {
			return
		}
		sum := 0
		for i, m := range g.Members {
			if m.Rank != sum || m.Slots < 1 || m.Slots > MaxSlots {
				t.Fatalf("accepted member %d %+v at rank sum %d", i, m, sum)
			}
			if got, ok := g.Member(m.ID); !ok || got.ID != m.ID {
				t.Fatalf("Member(%q) = %+v, %v", m.ID, got, ok)
			}
			sum += m.Slots
		}
		if sum != g.WorldSize || g.Number < 1 || g.Number > MaxGeneration || len(g.Members) > MaxMembers {
			t.Fatalf("accepted generation %d, world size %d, members hold %d", g.Number, g.WorldSize, sum)
		}
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeGeneration(b); err != nil {
			t.Fatalf("re-encoded generation %s refused: %v", b, err)
		}
	})
}

func FuzzDecodeStatus(f *testing.F) {
	f.Add([]byte(`{"step":12,"samples":384,"samples_per_s":96.5,"step_time_s":0.1,"step_time_p50_s":0.1,"step_time_p90_s":0.2,"generation":4,"time":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"step":-1}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		st, err := DecodeStatus(value)
		if err != nil {
			return
		}
		if st.Validate() != nil {
			t.Fatalf("accepted %+v", st)
		}
		if b, err := json.Marshal(st); err == nil {
			if _, err := DecodeStatus(b); err != nil {
				t.Fatalf("re-encoded status %s refused: %v", b, err)
			}
		}
	})
}

func FuzzDecodeVote(f *testing.F) {
	f.Add("suspects/w-1/w-2", []byte(`{"lease":42,"gone":true}`))
	f.Add("suspects//w-2", []byte(`{"lease":0}`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		target, voter, v, err := DecodeVote(key, value)
		if err != nil {
			return
		}
		if target == "" || voter == "" || v.Lease == 0 || VoteKey(target, voter) != key {
			t.Fatalf("DecodeVote(%q) = %q, %q, %+v", key, target, voter, v)
		}
	})
}

func FuzzDecodeCrash(f *testing.F) {
	f.Add("/ringside/default/j/crashes/w0", []byte(`{"generation":4,"exit_code":1,"ran_s":0.8,"stderr":["Traceback (most recent call last):","  File \"/work/train.py\", line 31, in <module>","    snapshot = torch.load(path)","EOFError: Ran out of input"],"max_restarts":3,"crash_loop":3,"time":"2026-01-02T03:04:05Z"}`))
	f.Add("crashes/w0", []byte(`{"generation":0,"exit_code":300,"signal":"kill","ran_s":-1}`))
	f.Add("crashes/", []byte(`{"generation":1}`))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		id, c, err := DecodeCrash(key, value)
		if err != nil {
			return
		}
		if ValidateID(id) != nil || c.Validate() != nil || len(c.Stderr) > MaxCrashLines {
			t.Fatalf("accepted crash %+v of %q", c, id)
		}
		_ = c.Cause()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, again, err := DecodeCrash(key, b); err != nil || !cmp.Equal(c, again, cmpopts.EquateEmpty()) {
			t.Fatalf("round trip: %+v -> %s -> %+v, %v", c, b, again, err)
		}
	})
}
