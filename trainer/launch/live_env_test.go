package launch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLiveEnvGivesTheSlotNotTheGeneration(t *testing.T) {
	tests := []struct {
		name string
		base []string
		want map[string]string
	}{
		{"defaults", []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1"}, map[string]string{
			"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "1",
		}},
		{"the user's OMP_NUM_THREADS stays, a stale LOCAL_RANK does not",
			[]string{"OMP_NUM_THREADS=4", "LOCAL_RANK=7"}, map[string]string{"OMP_NUM_THREADS": "4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			for _, kv := range liveEnv(tt.base, 1, 2, EnvOptions{RestartCount: 2, MaxRestarts: 3, RunID: "job", Socket: "/run/s.sock"}) {
				k, v, _ := cut(kv)
				if _, dup := got[k]; dup {
					t.Fatalf("%s set twice", k)
				}
				got[k] = v
			}
			want := map[string]string{
				"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "2",
				"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "job", "RINGSIDE_SOCKET": "/run/s.sock",
			}
			for k, v := range tt.want {
				want[k] = v
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
