package netopt

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const allHGXPorts = "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"

func TestRecommendOnMachines(t *testing.T) {
	tests := []struct {
		name     string
		build    func(f *sysfsFixture)
		tune     func(c *Config)
		env      map[string]string
		warnings []string
	}{
		{
			name: "HGX with 8 InfiniBand HCAs behind 4 PCIe switches uses IB with GPUDirect at PIX",
			build: func(f *sysfsFixture) {
				hgx(f)
				f.peerMemory("nvidia_peermem")
				f.uverbs(8)
			},
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth0",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=" + allHGXPorts,
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "0",
			},
		},
		{
			name: "HGX without a peer-memory module claims no GPUDirect",
			build: func(f *sysfsFixture) {
				hgx(f)
				f.uverbs(8)
			},
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth0",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=" + allHGXPorts,
				"NCCL_CROSS_NIC":     "0",
			},
			warnings: []string{
				"GPUDirect RDMA off: no peer-memory module (nvidia_peermem or nv_peer_mem) is loaded, so NICs read GPU memory only where NCCL can use DMA-BUF (NCCL 2.19+, Linux 5.12+, open GPU kernel modules) and otherwise every transfer is staged through host memory; load nvidia_peermem. NCCL_NET_GDR_LEVEL not set",
			},
		},
		{
			name: "HGX without /dev/infiniband falls back to sockets and says so",
			build: func(f *sysfsFixture) {
				hgx(f)
				f.peerMemory("nvidia_peermem")
			},
			env: map[string]string{"NCCL_SOCKET_IFNAME": "=eth0"},
			warnings: []string{
				"RDMA ports " + allHGXPorts + " are active but /dev/infiniband has no uverbs device (not mounted into the container?): NCCL cannot open them and falls back to TCP sockets; mount /dev/infiniband or request the RDMA device plugin's resource",
			},
		},
		{
			name: "HGX declared flat lets rings cross NICs",
			build: func(f *sysfsFixture) {
				hgx(f)
				f.peerMemory("nvidia_peermem")
				f.uverbs(8)
			},
			tune: func(c *Config) { c.Fabric = FabricFlat },
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth0",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=" + allHGXPorts,
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "1",
			},
		},
		{
			name: "HGX with one HCA down and one at a lower rate leaves the first out and warns about the second",
			build: func(f *sysfsFixture) {
				hgx(f)
				f.peerMemory("nvidia_peermem")
				f.uverbs(8)
				f.write("class/infiniband/mlx5_7/ports/1/state", "1: DOWN")
				f.write("class/infiniband/mlx5_6/ports/1/rate", "100 Gb/sec (4X EDR)")
			},
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth0",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1",
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "0",
			},
			warnings: []string{
				"mlx5_7:1 port state is DOWN: left out of NCCL_IB_HCA",
				"mixed link speeds (mlx5_0:1 200 Gb/s, mlx5_1:1 200 Gb/s, mlx5_2:1 200 Gb/s, mlx5_3:1 200 Gb/s, mlx5_4:1 200 Gb/s, mlx5_5:1 200 Gb/s, mlx5_6:1 100 Gb/s): rings run at the slowest link's pace",
			},
		},
		{
			name: "RoCE takes the RoCE v2 IPv4 GID at index 5, after the v1 and IPv6 entries",
			build: func(f *sysfsFixture) {
				roce(f)
				f.peerMemory("nv_peer_mem")
				f.uverbs(2)
			},
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth2",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=mlx5_0:1,mlx5_1:1",
				"NCCL_IB_GID_INDEX":  "5",
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "0",
			},
		},
		{
			name: "RoCE sets the traffic class and service level only when asked",
			build: func(f *sysfsFixture) {
				roce(f)
				f.peerMemory("nv_peer_mem")
				f.uverbs(2)
			},
			tune: func(c *Config) { c.IBTrafficClass, c.IBServiceLevel = 106, 3 },
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth2",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=mlx5_0:1,mlx5_1:1",
				"NCCL_IB_GID_INDEX":  "5",
				"NCCL_IB_TC":         "106",
				"NCCL_IB_SL":         "3",
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "0",
			},
		},
		{
			name: "RoCE with the IPv4 GID at different indexes leaves the index to NCCL",
			build: func(f *sysfsFixture) {
				roce(f)
				f.peerMemory("nv_peer_mem")
				f.uverbs(2)
				// mlx5_1's interface has a second IPv6 address: its IPv4 entries move to 6 and 7.
				f.gid("mlx5_1", 1, 4, "fd00:0000:0000:0000:0000:0000:0000:0002", gidTypV1, "eth3")
				f.gid("mlx5_1", 1, 5, "fd00:0000:0000:0000:0000:0000:0000:0002", gidTypV2, "eth3")
				f.gid("mlx5_1", 1, 6, "0000:0000:0000:0000:0000:ffff:0a00:0006", gidTypV1, "eth3")
				f.gid("mlx5_1", 1, 7, "0000:0000:0000:0000:0000:ffff:0a00:0006", gidTypV2, "eth3")
			},
			env: map[string]string{
				"NCCL_SOCKET_IFNAME": "=eth2",
				"NCCL_NET":           "IB",
				"NCCL_IB_HCA":        "=mlx5_0:1,mlx5_1:1",
				"NCCL_NET_GDR_LEVEL": "PIX",
				"NCCL_CROSS_NIC":     "0",
			},
			warnings: []string{
				"the RoCE v2 IPv4 GID sits at different indexes (mlx5_0:1 at 5, mlx5_1:1 at 7): NCCL_IB_GID_INDEX not set; NCCL 2.21 and later pick each device's RoCE v2 IPv4 GID themselves",
			},
		},
		{
			name: "RoCE without IPv4 addresses leaves the ports out and NCCL to decide",
			build: func(f *sysfsFixture) {
				roce(f)
				f.peerMemory("nv_peer_mem")
				f.uverbs(2)
				for _, dev := range []string{"mlx5_0", "mlx5_1"} {
					for _, i := range []string{"4", "5"} {
						f.write("class/infiniband/"+dev+"/ports/1/gids/"+i, zeroGID)
					}
				}
			},
			env: map[string]string{"NCCL_SOCKET_IFNAME": "=eth2"},
			warnings: []string{
				"mlx5_0:1 is RoCE but its GID table has no RoCE v2 IPv4 entry (no IPv4 address on its interface?): left out of NCCL_IB_HCA",
				"mlx5_1:1 is RoCE but its GID table has no RoCE v2 IPv4 entry (no IPv4 address on its interface?): left out of NCCL_IB_HCA",
				"no RDMA port is usable by NCCL's IB transport: NCCL_NET and NCCL_IB_HCA not set, NCCL decides by itself (it may try the devices, or fall back to TCP sockets)",
			},
		},
		{
			name:  "VM with virtio, docker0, a veth and lo picks the virtio interface and warns about sockets",
			build: vm,
			env:   map[string]string{"NCCL_SOCKET_IFNAME": "=eth0"},
			warnings: []string{
				"no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)",
			},
		},
		{
			name: "pod network namespace with only a veth eth0 warns that every interface is virtual",
			build: func(f *sysfsFixture) {
				f.netdev("eth0", "", "up", "10000", arphrdEther)
				f.netdev("lo", "", "unknown", "", arphrdLoopback)
			},
			env: map[string]string{"NCCL_SOCKET_IFNAME": "=eth0"},
			warnings: []string{
				"only virtual interfaces (eth0): NCCL's socket traffic goes through a bridge or overlay; give the pod a host or SR-IOV interface for bandwidth",
				"no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)",
			},
		},
		{
			name: "bond over two physical ports counts as physical",
			build: func(f *sysfsFixture) {
				f.pci("pci0000:00/0000:00:03.0", "0x8086", "0x1593", "0x020000", 0)
				f.pci("pci0000:00/0000:00:03.1", "0x8086", "0x1593", "0x020000", 0)
				f.netdev("ens3f0", "pci0000:00/0000:00:03.0", "up", "25000", arphrdEther)
				f.netdev("ens3f1", "pci0000:00/0000:00:03.1", "up", "25000", arphrdEther)
				f.netdev("bond0", "", "up", "50000", arphrdEther)
				f.link("devices/virtual/net/bond0/lower_ens3f0", "devices/pci0000:00/0000:00:03.0/net/ens3f0")
				f.link("devices/virtual/net/bond0/lower_ens3f1", "devices/pci0000:00/0000:00:03.1/net/ens3f1")
			},
			env: map[string]string{"NCCL_SOCKET_IFNAME": "=bond0"},
			warnings: []string{
				"no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)",
			},
		},
		{
			name: "node with only loopback and down links sets no interface",
			build: func(f *sysfsFixture) {
				f.pci("pci0000:00/0000:00:03.0", "0x8086", "0x1593", "0x020000", 0)
				f.netdev("eth0", "pci0000:00/0000:00:03.0", "down", "", arphrdEther)
				f.netdev("lo", "", "unknown", "", arphrdLoopback)
			},
			env: map[string]string{},
			warnings: []string{
				"no usable network interface (all are loopback, container, tunnel or down): NCCL_SOCKET_IFNAME not set, NCCL will pick one itself",
				"no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.build(f)
			cfg := f.config()
			if tt.tune != nil {
				tt.tune(&cfg)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			h, err := Detect(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := Recommend(h, cfg)
			if diff := cmp.Diff(tt.env, got.Map()); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.warnings, got.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			for _, e := range got.Env {
				if strings.TrimSpace(e.Reason) == "" {
					t.Errorf("%s has no reason", e.Name)
				}
			}
		})
	}
}

func TestRecommendExplainsEachChoice(t *testing.T) {
	f := newFixture(t)
	roce(f)
	f.peerMemory("nv_peer_mem")
	f.uverbs(2)
	h, err := Detect(context.Background(), f.config())
	if err != nil {
		t.Fatal(err)
	}
	s := Recommend(h, f.config())
	want := map[string]string{
		"NCCL_SOCKET_IFNAME": "eth2 is up, backed by PCI device 0000:13:00.0, 100000 Mb/s; preferred over eth3, eth0; left out: lo (loopback)",
		"NCCL_IB_GID_INDEX":  "RoCE v2 GID of an IPv4 address, found at index 5 of the GID table (mlx5_0:1 10.0.0.5 on eth2; mlx5_1:1 10.0.0.6 on eth3)",
		"NCCL_NET_GDR_LEVEL": "nv_peer_mem loaded and every GPU has an RDMA NIC at PIX or closer: GPUDirect RDMA between each GPU and its nearest NIC",
	}
	for _, e := range s.Env {
		if w, ok := want[e.Name]; ok && e.Reason != w {
			t.Errorf("%s reason:\n got %q\nwant %q", e.Name, e.Reason, w)
		}
	}
}

func TestRecommendLeavesARoCEFrontEndOutOfAnInfiniBandNode(t *testing.T) {
	f := newFixture(t)
	hgx(f)
	f.peerMemory("nvidia_peermem")
	f.uverbs(9)
	eth0 := "pci0000:00/0000:00:1c.0/0000:05:00.0"
	f.rdma("mlx5_8", eth0)
	f.rdmaPort("mlx5_8", 1, "4: ACTIVE", "25 Gb/sec (1X EDR)", "Ethernet")
	f.gid("mlx5_8", 1, 3, "0000:0000:0000:0000:0000:ffff:0a0a:0001", gidTypV2, "eth0")
	s := Recommend(detect(t, f), f.config())
	if v, _ := s.Lookup("NCCL_IB_HCA"); v != "="+allHGXPorts {
		t.Errorf("NCCL_IB_HCA = %q", v)
	}
	if _, ok := s.Lookup("NCCL_IB_GID_INDEX"); ok {
		t.Error("NCCL_IB_GID_INDEX set for an InfiniBand node")
	}
	for _, e := range s.Env {
		if e.Name == "NCCL_IB_HCA" && !strings.HasSuffix(e.Reason, "; Ethernet (RoCE) ports mlx5_8:1 left out: the InfiniBand fabric carries NCCL") {
			t.Errorf("reason %q does not say why mlx5_8 is left out", e.Reason)
		}
	}
	if len(s.Warnings) != 0 {
		t.Errorf("warnings: %q", s.Warnings)
	}
}

func TestTuneDetectsAndRecommends(t *testing.T) {
	f := newFixture(t)
	roce(f)
	f.peerMemory("nv_peer_mem")
	f.uverbs(2)
	s, err := Tune(context.Background(), f.config())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Map()["NCCL_IB_GID_INDEX"]; got != "5" {
		t.Errorf("NCCL_IB_GID_INDEX = %q, want 5", got)
	}
	cfg := f.config()
	cfg.IBServiceLevel = 16
	if _, err := Tune(context.Background(), cfg); err == nil || err.Error() != "netopt config: IB service level must be 0-15 (or -1 to leave it unset), got 16" {
		t.Errorf("got %v", err)
	}
}
