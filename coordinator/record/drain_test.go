package record

import (
	"strings"
	"testing"
)

func TestDrainsKeepTheNewestSamples(t *testing.T) {
	var d Drains
	for i := range MaxDrainSamples + 3 {
		d = d.Add(float64(i))
	}
	if len(d.Seconds) != MaxDrainSamples || d.Seconds[0] != 3 || d.Seconds[MaxDrainSamples-1] != MaxDrainSamples+2 {
		t.Fatalf("after %d adds: %d samples from %v to %v; want the newest %d", MaxDrainSamples+3, len(d.Seconds), d.Seconds[0], d.Seconds[len(d.Seconds)-1], MaxDrainSamples)
	}
	prev := Drains{Seconds: []float64{1}}
	_ = prev.Add(2)
	if len(prev.Seconds) != 1 {
		t.Errorf("Add changed its receiver: %v", prev.Seconds)
	}
}

func TestDecodeDrainsRejectsWhatNoDrainTook(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"not JSON", `{"seconds":`, "malformed drains"},
		{"negative", `{"seconds":[1,-2]}`, "drain duration 1 is -2 s"},
		{"past a day", `{"seconds":[90000]}`, "drain duration 0 is 90000 s"},
		{"too many", `{"seconds":[` + strings.Repeat("1,", MaxDrainSamples) + `1]}`, "more than 64"},
	} {
		if _, err := DecodeDrains([]byte(tc.value)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	d, err := DecodeDrains([]byte(`{"seconds":[0.5,2.25]}`))
	if err != nil || len(d.Seconds) != 2 || d.Seconds[1] != 2.25 {
		t.Errorf("a valid record: %+v, %v", d, err)
	}
}
