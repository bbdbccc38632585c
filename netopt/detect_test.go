package netopt

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func detect(t *testing.T, f *sysfsFixture) *Host {
	t.Helper()
	h, err := Detect(context.Background(), f.config())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDetectReadsAnHGXServer(t *testing.T) {
	f := newFixture(t)
	hgx(f)
	f.peerMemory("nvidia_peermem")
	f.uverbs(8)
	h := detect(t, f)

	var gpus []string
	for _, g := range h.GPUs {
		gpus = append(gpus, g.Addr)
	}
	want := []string{"0000:12:00.0", "0000:13:00.0", "0000:22:00.0", "0000:23:00.0", "0000:92:00.0", "0000:93:00.0", "0000:a2:00.0", "0000:a3:00.0"}
	if diff := cmp.Diff(want, gpus); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if len(h.NVSwitches) != 4 || len(h.RDMA) != 8 || len(h.NUMANodes) != 2 {
		t.Errorf("got %d NVSwitches, %d RDMA devices, %d NUMA nodes; want 4, 8, 2", len(h.NVSwitches), len(h.RDMA), len(h.NUMANodes))
	}
	if h.PeerMemory != "nvidia_peermem" || !h.DevInfiniband {
		t.Errorf("peer memory %q, /dev/infiniband %v", h.PeerMemory, h.DevInfiniband)
	}
	wantPort := RDMAPort{Port: 1, State: "ACTIVE", RateGbps: 200, LinkLayer: "InfiniBand",
		GIDs: []GID{{Index: 0, GID: "fe80:0000:0000:0000:b83f:d203:00a0:0000", Type: "IB/RoCE v1"}}}
	if diff := cmp.Diff(RDMADevice{Name: "mlx5_0", PCIAddr: "0000:14:00.0", Ports: []RDMAPort{wantPort}}, h.RDMA[0]); diff != "" {
		t.Errorf("mlx5_0 (-want +got):\n%s", diff)
	}
	eth0 := Interface{Name: "eth0", OperState: "up", SpeedMbps: 25000, Type: arphrdEther, PCIAddr: "0000:05:00.0"}
	lo := Interface{Name: "lo", OperState: "unknown", Type: arphrdLoopback, Virtual: true}
	for _, w := range []Interface{eth0, lo} {
		i := slices.IndexFunc(h.Interfaces, func(got Interface) bool { return got.Name == w.Name })
		if i < 0 {
			t.Errorf("%s not found", w.Name)
		} else if diff := cmp.Diff(w, h.Interfaces[i]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", w.Name, diff)
		}
	}
	paths := map[[2]string]PathType{}
	for _, p := range h.Paths {
		paths[[2]string{p.GPU, p.NIC}] = p.Path
	}
	for pair, want := range map[[2]string]PathType{
		{"0000:12:00.0", "mlx5_0"}: PathPIX, // same switch
		{"0000:13:00.0", "mlx5_1"}: PathPIX,
		{"0000:12:00.0", "mlx5_2"}: PathPHB, // other switch, same root complex
		{"0000:12:00.0", "mlx5_4"}: PathSYS, // other socket
		{"0000:a3:00.0", "mlx5_7"}: PathPIX,
	} {
		if paths[pair] != want {
			t.Errorf("path %s - %s = %s, want %s", pair[0], pair[1], paths[pair], want)
		}
	}
	if len(h.Warnings) != 0 {
		t.Errorf("unexpected warnings: %q", h.Warnings)
	}
}

func TestPCIPathClassifiesLikeNvidiaSMI(t *testing.T) {
	dev := func(numa int, chain ...string) PCIDevice { return PCIDevice{NUMANode: numa, chain: chain} }
	sw := []string{"pci0000:00", "0000:00:01.0", "0000:01:00.0"}
	tests := []struct {
		name  string
		a, b  PCIDevice
		numas int
		want  PathType
	}{
		{"same switch is PIX", dev(0, append(sw, "0000:02:00.0", "0000:03:00.0")...), dev(0, append(sw, "0000:02:01.0", "0000:04:00.0")...), 2, PathPIX},
		{"one switch below another is PXB", dev(0, append(sw, "0000:02:00.0", "0000:05:00.0", "0000:06:00.0", "0000:07:00.0")...), dev(0, append(sw, "0000:02:01.0", "0000:04:00.0")...), 2, PathPXB},
		{"different root ports of one root complex is PHB", dev(0, "pci0000:00", "0000:00:01.0", "0000:01:00.0"), dev(0, "pci0000:00", "0000:00:02.0", "0000:02:00.0"), 2, PathPHB},
		{"different root complexes on one NUMA node is NODE", dev(0, "pci0000:00", "0000:00:01.0", "0000:01:00.0"), dev(0, "pci0000:40", "0000:40:01.0", "0000:41:00.0"), 2, PathNODE},
		{"different NUMA nodes is SYS", dev(0, "pci0000:00", "0000:00:01.0", "0000:01:00.0"), dev(1, "pci0000:80", "0000:80:01.0", "0000:81:00.0"), 2, PathSYS},
		{"unknown NUMA on a one-node machine is NODE", dev(-1, "pci0000:00", "0000:00:01.0"), dev(-1, "pci0000:40", "0000:40:01.0"), 1, PathNODE},
		{"unknown NUMA on a two-node machine is SYS", dev(-1, "pci0000:00", "0000:00:01.0"), dev(-1, "pci0000:40", "0000:40:01.0"), 2, PathSYS},
		{"a device outside the tree is unknown", dev(0), dev(0, "pci0000:00", "0000:00:01.0"), 2, PathUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pciPath(tt.a, tt.b, tt.numas); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if got := pciPath(tt.b, tt.a, tt.numas); got != tt.want {
				t.Errorf("reversed: got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDetectSkipsBadFilesWithAWarning(t *testing.T) {
	const (
		port0 = "class/infiniband/mlx5_0/ports/1"
		// Without mlx5_0, GPU 0's nearest NIC is behind the other switch.
		gpu0PHB = "GPU 0000:12:00.0's nearest RDMA NIC is at PHB, through the CPU: GPUDirect RDMA over that path is usually slower than staging, NCCL_NET_GDR_LEVEL left to NCCL's default"
	)
	tests := []struct {
		name     string
		spoil    func(f *sysfsFixture)
		warnings []string
		check    func(t *testing.T, h *Host, s Settings)
	}{
		{
			name:     "garbage interface speed is unknown, not a number",
			spoil:    func(f *sysfsFixture) { f.write("class/net/eth2/speed", "fast") },
			warnings: []string{`class/net/eth2/speed: unexpected value "fast"; speed taken as unknown`},
			check: func(t *testing.T, h *Host, s Settings) {
				if v, _ := s.Lookup("NCCL_SOCKET_IFNAME"); v != "=eth3" {
					t.Errorf("NCCL_SOCKET_IFNAME = %q, want =eth3 (eth2's speed is unknown now)", v)
				}
			},
		},
		{
			name:  "unreadable speed of a down link is quietly unknown",
			spoil: func(f *sysfsFixture) { f.unreadable("class/net/eth0/speed") },
		},
		{
			name:     "garbage interface type is unknown",
			spoil:    func(f *sysfsFixture) { f.write("class/net/eth0/type", "ether") },
			warnings: []string{`class/net/eth0/type: unexpected value "ether"; type taken as unknown`},
		},
		{
			name:     "unreadable type of the IPv4 RoCE v1 entry is never taken for v2",
			spoil:    func(f *sysfsFixture) { f.unreadable(port0 + "/gid_attrs/types/4") },
			warnings: []string{port0 + "/gid_attrs/types/4: unreadable (is a directory); GID 4 has no known type and is not used"},
			check:    wantEnv("NCCL_IB_GID_INDEX", "5"),
		},
		{
			name: "unreadable types of every IPv4 entry leave the port out",
			spoil: func(f *sysfsFixture) {
				f.unreadable(port0 + "/gid_attrs/types/4")
				f.unreadable(port0 + "/gid_attrs/types/5")
			},
			warnings: []string{
				port0 + "/gid_attrs/types/4: unreadable (is a directory); GID 4 has no known type and is not used",
				port0 + "/gid_attrs/types/5: unreadable (is a directory); GID 5 has no known type and is not used",
				"mlx5_0:1 is RoCE but its GID table has no RoCE v2 IPv4 entry (no IPv4 address on its interface?): left out of NCCL_IB_HCA",
				gpu0PHB,
			},
			check: wantEnv("NCCL_IB_HCA", "=mlx5_1:1"),
		},
		{
			name:     "garbage GID is skipped",
			spoil:    func(f *sysfsFixture) { f.write(port0+"/gids/5", "not-a-gid") },
			warnings: []string{port0 + `/gids/5: unexpected value "not-a-gid", entry skipped`, "mlx5_0:1 is RoCE but its GID table has no RoCE v2 IPv4 entry (no IPv4 address on its interface?): left out of NCCL_IB_HCA", gpu0PHB},
			check:    wantEnv("NCCL_IB_HCA", "=mlx5_1:1"),
		},
		{
			name:     "missing port state skips the port",
			spoil:    func(f *sysfsFixture) { f.remove(port0 + "/state") },
			warnings: []string{port0 + "/state: missing; port skipped", gpu0PHB},
			check:    wantEnv("NCCL_IB_HCA", "=mlx5_1:1"),
		},
		{
			name:     "port state without its number skips the port",
			spoil:    func(f *sysfsFixture) { f.write(port0+"/state", "ACTIVE") },
			warnings: []string{port0 + `/state: unexpected value "ACTIVE"; port skipped`, gpu0PHB},
			check:    wantEnv("NCCL_IB_HCA", "=mlx5_1:1"),
		},
		{
			name:     "garbage rate is unknown",
			spoil:    func(f *sysfsFixture) { f.write(port0+"/rate", "fast") },
			warnings: []string{port0 + `/rate: unexpected value "fast"; rate taken as unknown`},
			check: func(t *testing.T, h *Host, _ Settings) {
				if r := h.RDMA[0].Ports[0].RateGbps; r != 0 {
					t.Errorf("rate = %g, want 0", r)
				}
			},
		},
		{
			name:     "GPU without a vendor file is skipped",
			spoil:    func(f *sysfsFixture) { f.remove("bus/pci/devices/0000:12:00.0/vendor") },
			warnings: []string{"bus/pci/devices/0000:12:00.0/vendor: missing; device skipped"},
			check: func(t *testing.T, h *Host, _ Settings) {
				if len(h.GPUs) != 1 {
					t.Errorf("got %d GPUs, want 1", len(h.GPUs))
				}
			},
		},
		{
			name:     "garbage NUMA node is unknown",
			spoil:    func(f *sysfsFixture) { f.write("bus/pci/devices/0000:12:00.0/numa_node", "zero") },
			warnings: []string{`bus/pci/devices/0000:12:00.0/numa_node: unexpected value "zero"; NUMA node taken as unknown`},
			check: func(t *testing.T, h *Host, _ Settings) {
				if n := h.GPUs[0].NUMANode; n != -1 {
					t.Errorf("NUMA node = %d, want -1", n)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			roce(f)
			f.peerMemory("nv_peer_mem")
			f.uverbs(2)
			tt.spoil(f)
			h := detect(t, f)
			s := Recommend(h, f.config())
			if diff := cmp.Diff(tt.warnings, s.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tt.check != nil {
				tt.check(t, h, s)
			}
		})
	}
}

// wantEnv checks one recommended variable.
func wantEnv(name, value string) func(*testing.T, *Host, Settings) {
	return func(t *testing.T, _ *Host, s Settings) {
		t.Helper()
		if got, ok := s.Lookup(name); !ok || got != value {
			t.Errorf("%s = %q (set %v), want %q", name, got, ok, value)
		}
	}
}

func TestDetectFailsOnlyWithoutASysfsRoot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SysfsRoot = t.TempDir() + "/absent"
	if _, err := Detect(context.Background(), cfg); err == nil {
		t.Fatal("want an error for a missing sysfs root")
	}
	cfg.SysfsRoot = t.TempDir() // empty: a machine with nothing to report
	h, err := Detect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Interfaces)+len(h.RDMA)+len(h.GPUs) != 0 || len(h.Warnings) != 0 {
		t.Errorf("empty tree gave %+v", h)
	}
}

func TestDetectStopsWhenCancelled(t *testing.T) {
	f := newFixture(t)
	vm(f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Detect(ctx, f.config()); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
