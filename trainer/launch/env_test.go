package launch

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

func TestEnvFollowsTorchrunPerRankAndSlot(t *testing.T) {
	r := &api.Rendezvous{
		Generation: 7, Member: "w1", State: record.StateActive,
		Rank: 2, Ranks: []int{2, 3}, LocalWorldSize: 2, WorldSize: 5, GroupRank: 1, NumGroups: 3,
		MasterAddr: "10.0.0.1", MasterPort: 29507,
		NCCL: map[string]string{"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0:1"},
	}
	base := []string{"PATH=/bin", "RANK=99", "OMP_NUM_THREADS=4", "NCCL_IB_HCA=mine"}
	o := EnvOptions{RestartCount: 3, MaxRestarts: 5, RunID: "job-1", Socket: "/run/s.sock"}
	for slot, wantRank := range []string{"2", "3"} {
		env := Env(base, r, slot, o)
		got := map[string]string{}
		for _, kv := range env {
			k, v, _ := cut(kv)
			if _, dup := got[k]; dup {
				t.Fatalf("%s set twice in %v", k, env)
			}
			got[k] = v
		}
		want := map[string]string{
			"PATH": "/bin", "RANK": wantRank, "LOCAL_RANK": []string{"0", "1"}[slot], "WORLD_SIZE": "5",
			"LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "NODE_RANK": "1", "GROUP_WORLD_SIZE": "3",
			"ROLE_NAME": "default", "ROLE_RANK": wantRank, "ROLE_WORLD_SIZE": "5",
			"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29507",
			"TORCHELASTIC_RESTART_COUNT": "3", "TORCHELASTIC_MAX_RESTARTS": "5", "TORCHELASTIC_RUN_ID": "job-1",
			"TORCHELASTIC_USE_AGENT_STORE": "False",
			"RINGSIDE_GENERATION":          "7", "RINGSIDE_MEMBER": "w1", "RINGSIDE_SOCKET": "/run/s.sock",
			// the user's own choices win over defaults and netopt
			"OMP_NUM_THREADS": "4", "NCCL_IB_HCA": "mine",
			"NCCL_SOCKET_IFNAME": "=eth0",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("slot %d env (-want +got):\n%s", slot, diff)
		}
	}
	if env := Env([]string{"PATH=/bin"}, r, 0, o); !slices.Contains(env, "OMP_NUM_THREADS=1") {
		t.Error("OMP_NUM_THREADS not defaulted to 1")
	}
}

func cut(kv string) (string, string, bool) {
	for i := range len(kv) {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
