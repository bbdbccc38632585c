package netopt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// FuzzSysfsValues runs detection and the NCCL recommendation over a small
// node (a GPU and a RoCE NIC behind one PCIe switch, a NUMA node, lo) whose
// attribute files hold the fuzzed values: whatever a driver or a container
// runtime puts in sysfs, nothing may panic or fail; odd values become
// warnings. The tree is built once per process and only its attribute
// files are rewritten for each input.
func FuzzSysfsValues(f *testing.F) {
	f.Add("0x030200", "0", "100000", "up", "1", "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet",
		"0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "0-31", "ffffffff")
	f.Add("0xzz", "-7", "-1", "", "x", "ACTIVE", "lots", "", "::", "", "31-0", "")
	f.Add("0x030200", "99999999999999999999", "4294967295", "down", "65535", "4:", " Gb/sec", "InfiniBand",
		"fe80::1", "IB/RoCE v1", "0-4294967295", "zz")
	fx := newFixture(f)
	rp, sw := "pci0000:00/0000:00:01.0", "pci0000:00/0000:00:01.0/0000:10:00.0"
	fx.bridge(rp, 0)
	fx.bridge(sw, 0)
	gpu, nic := sw+"/0000:11:00.0", sw+"/0000:12:00.0"
	fx.pci(gpu, "0x10de", "0x20b5", "0x030200", 0)
	fx.pci(nic, "0x15b3", "0x101d", "0x020000", 0)
	fx.rdma("mlx5_0", nic)
	fx.netdev("eth1", nic, "up", "100000", arphrdEther)
	fx.rdmaPort("mlx5_0", 1, "4: ACTIVE", "100 Gb/sec", "Ethernet")
	fx.gid("mlx5_0", 1, 0, zeroGID, gidTypV2, "eth1")
	fx.numa(0, "0-31", "ffffffff")
	fx.netdev("lo", "", "unknown", "", arphrdLoopback)
	port := fx.portDir("mlx5_0", 1)
	files := []string{
		"devices/" + gpu + "/class", "devices/" + gpu + "/numa_node", "devices/" + nic + "/net/eth1/speed",
		"devices/" + nic + "/net/eth1/operstate", "devices/" + nic + "/net/eth1/type", port + "/state", port + "/rate",
		port + "/link_layer", port + "/gids/0", port + "/gid_attrs/types/0",
		"devices/system/node/node0/cpulist", "devices/system/node/node0/cpumap",
	}
	cfg := fx.config()
	f.Fuzz(func(t *testing.T, gpuClass, numa, speed, operstate, typ, portState, rate, linkLayer, gid, gidType, cpulist, cpumap string) {
		for i, v := range []string{gpuClass, numa, speed, operstate, typ, portState, rate, linkLayer, gid, gidType, cpulist, cpumap} {
			if len(v) > 4096 {
				return // an attribute is a page at most
			}
			if err := os.WriteFile(fx.abs(files[i]), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		settings, err := Tune(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Tune: %v", err)
		}
		_ = settings.Map()
		for _, w := range settings.Warnings {
			_ = fmt.Sprint(w)
		}
	})
}

// FuzzReadCluster reads any bytes as a cluster file (`ringside netopt plan
// --cluster FILE`): nothing may panic, and an accepted file is written
// back as one that reads the same.
func FuzzReadCluster(f *testing.F) {
	f.Add([]byte(`[{"id":"m0","topology":["z0","r0"],"slots":8},{"id":"m1","topology":["z0","r1"],"slots":8}]`))
	f.Add([]byte(`[{"id":"m0","topology":[],"slots":1e18}]`))
	f.Add([]byte(`[{"id":"a/b","topology":[" "],"slots":0}] trailing`))
	f.Fuzz(func(t *testing.T, data []byte) {
		members, err := ReadCluster(bytes.NewReader(data))
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an empty error")
			}
			return
		}
		var b bytes.Buffer
		if err := WriteCluster(&b, members); err != nil {
			t.Fatal(err)
		}
		again, err := ReadCluster(&b)
		if err != nil || len(again) != len(members) {
			t.Fatalf("written back as %s: %d members, %v", b.Bytes(), len(again), err)
		}
		_ = Members(members)
	})
}
