package record

import (
	"math"
	"strings"
	"testing"
)

func TestDecodeStragglerChecksTheKeyAndEveryField(t *testing.T) {
	const good = `{"generation":3,"since_step":100,"step":131,"compute_time_s":0.075,"median_compute_time_s":0.05,"action":"replace","node":"n1","leader":"w0","time":"2026-01-01T00:00:00Z"}`
	id, s, err := DecodeStraggler("/ringside/default/job/stragglers/w3", []byte(good))
	if err != nil || id != "w3" || s.Action != ActionReplace || math.Abs(s.Ratio()-1.5) > 1e-9 {
		t.Fatalf("DecodeStraggler(good) = %q, %+v, %v; want w3, replace, ratio 1.5", id, s, err)
	}
	for _, tt := range []struct{ name, key, value, want string }{
		{"not a straggler key", "stragglers/", good, "malformed straggler key"},
		{"a bad id", "stragglers/a b", good, "malformed straggler key"},
		{"not JSON", "stragglers/w1", `{`, "malformed straggler w1"},
		{"no generation", "stragglers/w1", strings.Replace(good, `"generation":3`, `"generation":0`, 1), "generation 0"},
		{"steps backwards", "stragglers/w1", strings.Replace(good, `"step":131`, `"step":99`, 1), "not a range of steps"},
		{"a negative time", "stragglers/w1", strings.Replace(good, `"compute_time_s":0.075`, `"compute_time_s":-1`, 1), "compute time"},
		{"an unknown action", "stragglers/w1", strings.Replace(good, `"replace"`, `"evict"`, 1), `straggler policy "evict"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := DecodeStraggler(tt.key, []byte(tt.value)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if KindOf("/ringside/default/job/stragglers/w1") != "straggler" {
		t.Errorf("KindOf(stragglers/w1) = %q, want straggler", KindOf("/ringside/default/job/stragglers/w1"))
	}
}
