package launch

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

// Live mode sets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT for each slot, so code that reads them before elastic.run
// works: the current generation's when this member is placed in it, else
// this member's alone.
func TestLiveEnvGivesEachSlotTorchrunsVariables(t *testing.T) {
	active := &api.Rendezvous{Generation: 7, Member: "w2", State: record.StateActive, Rank: 4, Ranks: []int{4, 5},
		LocalWorldSize: 2, WorldSize: 8, GroupRank: 2, NumGroups: 4, MasterAddr: "10.0.0.1", MasterPort: 29517}
	standby := &api.Rendezvous{Generation: 7, Member: "w9", State: record.StateStandby, Rank: -1, WorldSize: 8,
		MasterAddr: "10.0.0.1", MasterPort: 29517}
	alone := map[string]string{
		"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "GROUP_RANK": "0",
		"NODE_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2",
	}
	placed := map[string]string{
		"RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29517", "GROUP_RANK": "2",
		"NODE_RANK": "2", "GROUP_WORLD_SIZE": "4", "ROLE_NAME": "default", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "8",
		"RINGSIDE_GENERATION": "7", "RINGSIDE_MEMBER": "w2",
	}
	tests := []struct {
		name string
		base []string
		gen  *api.Rendezvous
		want map[string]string
	}{
		{"no generation yet: this member alone", []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1"}, nil,
			merge(alone, map[string]string{"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "1"})},
		{"placed in the current generation", nil, active, merge(placed, map[string]string{"OMP_NUM_THREADS": "1"})},
		{"a standby member: this member alone", nil, standby, merge(alone, map[string]string{"OMP_NUM_THREADS": "1"})},
		{"the user's OMP_NUM_THREADS stays, stale RANK and LOCAL_RANK do not",
			[]string{"OMP_NUM_THREADS=4", "LOCAL_RANK=7", "RANK=9", "MASTER_PORT=1"}, active,
			merge(placed, map[string]string{"OMP_NUM_THREADS": "4"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			for _, kv := range liveEnv(tt.base, 1, 2, EnvOptions{RestartCount: 2, MaxRestarts: 3, RunID: "job", Socket: "/run/s.sock"}, tt.gen) {
				k, v, _ := cut(kv)
				if _, dup := got[k]; dup {
					t.Fatalf("%s set twice", k)
				}
				got[k] = v
			}
			want := merge(map[string]string{
				"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "2",
				"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "job", "RINGSIDE_SOCKET": "/run/s.sock",
			}, tt.want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
