package netopt

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"testing"
)

// sysfsFixture builds a fake /sys and /dev the way the kernel lays them
// out: devices under devices/pci..., reached through symlinks from
// bus/pci/devices, class/net and class/infiniband, with relative links as
// on a real machine.
type sysfsFixture struct {
	t   testing.TB
	sys string
	dev string
}

func newFixture(t testing.TB) *sysfsFixture {
	t.Helper()
	root := t.TempDir()
	f := &sysfsFixture{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev")}
	f.mkdir("")
	if err := os.MkdirAll(f.dev, 0o755); err != nil {
		t.Fatal(err)
	}
	return f
}

// config points a default configuration at the fixture.
func (f *sysfsFixture) config() Config {
	c := DefaultConfig()
	c.SysfsRoot, c.DevRoot = f.sys, f.dev
	return c
}

func (f *sysfsFixture) abs(rel string) string { return filepath.Join(f.sys, filepath.FromSlash(rel)) }

func (f *sysfsFixture) mkdir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(f.abs(rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// write creates rel with content plus the kernel's trailing newline.
func (f *sysfsFixture) write(rel, content string) {
	f.t.Helper()
	f.mkdir(path.Dir(rel))
	if err := os.WriteFile(f.abs(rel), []byte(content+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// remove deletes rel, to leave an attribute missing.
func (f *sysfsFixture) remove(rel string) {
	f.t.Helper()
	if err := os.RemoveAll(f.abs(rel)); err != nil {
		f.t.Fatal(err)
	}
}

// unreadable replaces rel by a directory: reading it fails (EISDIR) the way
// reading some sysfs attributes fails with EINVAL. Permissions would not
// do, tests may run as root.
func (f *sysfsFixture) unreadable(rel string) {
	f.remove(rel)
	f.mkdir(rel)
}

// link makes rel a relative symlink to target (both relative to the root).
func (f *sysfsFixture) link(rel, target string) {
	f.t.Helper()
	f.mkdir(path.Dir(rel))
	to, err := filepath.Rel(filepath.Dir(f.abs(rel)), f.abs(target))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(to, f.abs(rel)); err != nil {
		f.t.Fatal(err)
	}
}

// pci creates a PCI function at devices/<p>, p being its full path from
// the root complex ("pci0000:00/0000:00:01.0/0000:01:00.0").
func (f *sysfsFixture) pci(p, vendor, device, class string, numa int) {
	dir := "devices/" + p
	f.write(dir+"/vendor", vendor)
	f.write(dir+"/device", device)
	f.write(dir+"/class", class)
	f.write(dir+"/numa_node", fmt.Sprint(numa))
	f.link("bus/pci/devices/"+path.Base(p), dir)
}

// bridge creates a PCIe bridge (root port or switch port).
func (f *sysfsFixture) bridge(p string, numa int) {
	f.pci(p, "0x10b5", "0xc040", "0x060400", numa)
}

// netdev creates an interface; pciPath "" makes it virtual.
func (f *sysfsFixture) netdev(name, pciPath, operstate, speed string, typ int) {
	dir := "devices/virtual/net/" + name
	if pciPath != "" {
		dir = "devices/" + pciPath + "/net/" + name
		f.link(dir+"/device", "devices/"+pciPath)
	}
	f.write(dir+"/operstate", operstate)
	f.write(dir+"/type", fmt.Sprint(typ))
	if speed != "" {
		f.write(dir+"/speed", speed)
	}
	f.link("class/net/"+name, dir)
}

// rdma creates an RDMA device on the PCI function at pciPath.
func (f *sysfsFixture) rdma(name, pciPath string) {
	dir := "devices/" + pciPath + "/infiniband/" + name
	f.link(dir+"/device", "devices/"+pciPath)
	f.link("class/infiniband/"+name, dir)
}

func (f *sysfsFixture) portDir(dev string, port int) string {
	return fmt.Sprintf("class/infiniband/%s/ports/%d", dev, port)
}

// rdmaPort creates a port with its state ("4: ACTIVE"), rate and link layer.
func (f *sysfsFixture) rdmaPort(dev string, port int, state, rate, linkLayer string) {
	dir := f.portDir(dev, port)
	f.write(dir+"/state", state)
	f.write(dir+"/phys_state", "5: LinkUp")
	f.write(dir+"/rate", rate)
	f.write(dir+"/link_layer", linkLayer)
}

// gid fills one GID table entry; typ "" leaves the type unreadable as the
// kernel does for empty entries.
func (f *sysfsFixture) gid(dev string, port, index int, gid, typ, ndev string) {
	dir := f.portDir(dev, port)
	f.write(fmt.Sprintf("%s/gids/%d", dir, index), gid)
	if typ == "" {
		f.unreadable(fmt.Sprintf("%s/gid_attrs/types/%d", dir, index))
	} else {
		f.remove(fmt.Sprintf("%s/gid_attrs/types/%d", dir, index))
		f.write(fmt.Sprintf("%s/gid_attrs/types/%d", dir, index), typ)
	}
	if ndev != "" {
		f.write(fmt.Sprintf("%s/gid_attrs/ndevs/%d", dir, index), ndev)
	}
}

func (f *sysfsFixture) numa(id int, cpulist, cpumap string) {
	dir := fmt.Sprintf("devices/system/node/node%d", id)
	f.write(dir+"/cpulist", cpulist)
	f.write(dir+"/cpumap", cpumap)
}

// peerMemory loads a peer-memory kernel module.
func (f *sysfsFixture) peerMemory(module string) { f.mkdir("module/" + module + "/parameters") }

// uverbs creates /dev/infiniband/uverbs0..n-1.
func (f *sysfsFixture) uverbs(n int) {
	f.t.Helper()
	dir := filepath.Join(f.dev, "infiniband")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("uverbs%d", i)), nil, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

const (
	zeroGID  = "0000:0000:0000:0000:0000:0000:0000:0000"
	gidTypV1 = "IB/RoCE v1"
	gidTypV2 = "RoCE v2"
)

// hgx builds an 8-GPU server the way HGX/DGX boards are wired: two NUMA
// nodes with one root complex each, two PCIe switches per root complex,
// and behind each switch two GPUs and two 200 Gb/s InfiniBand HCAs (one per
// GPU), plus four NVSwitches, a 25 Gb/s management NIC, lo and docker0.
// GPUs are 0000:{12,13,22,23,92,93,a2,a3}:00.0; HCA mlx5_i sits next to
// the i-th GPU.
func hgx(f *sysfsFixture) {
	f.numa(0, "0-55,112-167", "000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff")
	f.numa(1, "56-111,168-223", "ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000")
	for s := range 4 {
		numa := s / 2
		rootBus := 0x80 * numa
		root := fmt.Sprintf("pci0000:%02x", rootBus)
		upBus := rootBus + 0x10*(1+s%2)
		rp := fmt.Sprintf("%s/0000:%02x:%02x.0", root, rootBus, 1+s%2)
		up := fmt.Sprintf("%s/0000:%02x:00.0", rp, upBus)
		f.bridge(rp, numa)
		f.bridge(up, numa)
		for k := range 4 {
			down := fmt.Sprintf("%s/0000:%02x:%02x.0", up, upBus+1, k)
			f.bridge(down, numa)
			ep := fmt.Sprintf("%s/0000:%02x:00.0", down, upBus+2+k)
			if k < 2 {
				f.pci(ep, "0x10de", "0x2330", "0x030200", numa)
				continue
			}
			i := 2*s + k - 2
			name := fmt.Sprintf("mlx5_%d", i)
			f.pci(ep, "0x15b3", "0x101b", "0x020700", numa)
			f.rdma(name, ep)
			f.rdmaPort(name, 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")
			f.gid(name, 1, 0, fmt.Sprintf("fe80:0000:0000:0000:b83f:d203:00a0:%04x", i), gidTypV1, "")
			f.gid(name, 1, 1, zeroGID, "", "")
			f.netdev(fmt.Sprintf("ib%d", i), ep, "up", "200000", arphrdInfiniband)
		}
	}
	f.bridge("pci0000:00/0000:00:08.0", 0)
	for n := range 4 {
		f.pci(fmt.Sprintf("pci0000:00/0000:00:08.0/0000:40:%02x.0", n), "0x10de", "0x22a3", "0x068000", 0)
	}
	f.bridge("pci0000:00/0000:00:1c.0", 0)
	f.pci("pci0000:00/0000:00:1c.0/0000:05:00.0", "0x8086", "0x1593", "0x020000", 0)
	f.netdev("eth0", "pci0000:00/0000:00:1c.0/0000:05:00.0", "up", "25000", arphrdEther)
	f.netdev("lo", "", "unknown", "", arphrdLoopback)
	f.netdev("docker0", "", "down", "", arphrdEther)
}

// roce builds a 2-GPU server with two 100 Gb/s RoCE NICs, each behind a
// PCIe switch with one GPU. Their GID tables hold, as a NIC with an IPv6
// and an IPv4 address does: link-local v1 and v2 at 0 and 1, the IPv6
// address v1 and v2 at 2 and 3, the IPv4 address v1 and v2 at 4 and 5.
func roce(f *sysfsFixture) {
	f.numa(0, "0-31", "ffffffff")
	for s := range 2 {
		rp := fmt.Sprintf("pci0000:00/0000:00:%02x.0", 1+s)
		up := fmt.Sprintf("%s/0000:%02x:00.0", rp, 0x10*(1+s))
		f.bridge(rp, 0)
		f.bridge(up, 0)
		for k := range 2 {
			down := fmt.Sprintf("%s/0000:%02x:%02x.0", up, 0x10*(1+s)+1, k)
			f.bridge(down, 0)
			ep := fmt.Sprintf("%s/0000:%02x:00.0", down, 0x10*(1+s)+2+k)
			if k == 0 {
				f.pci(ep, "0x10de", "0x20b5", "0x030200", 0)
				continue
			}
			name, ndev := fmt.Sprintf("mlx5_%d", s), fmt.Sprintf("eth%d", 2+s)
			f.pci(ep, "0x15b3", "0x101d", "0x020000", 0)
			f.rdma(name, ep)
			f.netdev(ndev, ep, "up", "100000", arphrdEther)
			f.rdmaPort(name, 1, "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")
			ll := fmt.Sprintf("fe80:0000:0000:0000:0ac0:ebff:fe00:%04x", s)
			v6 := fmt.Sprintf("fd00:0000:0000:0000:0ac0:ebff:fe00:%04x", s)
			v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a00:%04x", 5+s)
			for i, e := range [][2]string{{ll, gidTypV1}, {ll, gidTypV2}, {v6, gidTypV1}, {v6, gidTypV2}, {v4, gidTypV1}, {v4, gidTypV2}, {zeroGID, ""}, {zeroGID, ""}} {
				f.gid(name, 1, i, e[0], e[1], ndev)
			}
		}
	}
	f.bridge("pci0000:00/0000:00:1c.0", 0)
	f.pci("pci0000:00/0000:00:1c.0/0000:05:00.0", "0x8086", "0x1563", "0x020000", 0)
	f.netdev("eth0", "pci0000:00/0000:00:1c.0/0000:05:00.0", "up", "25000", arphrdEther)
	f.netdev("lo", "", "unknown", "", arphrdLoopback)
}

// vm builds a cloud VM: every device on the root bus, a virtio NIC (whose
// device link leads to virtio0 below the PCI function), one GPU, docker0,
// a veth and lo; no RDMA and no peer memory.
func vm(f *sysfsFixture) {
	f.numa(0, "0-7", "ff")
	f.pci("pci0000:00/0000:00:03.0", "0x1af4", "0x1000", "0x020000", -1)
	dir := "devices/pci0000:00/0000:00:03.0/virtio0/net/eth0"
	f.mkdir("devices/pci0000:00/0000:00:03.0/virtio0")
	f.link(dir+"/device", "devices/pci0000:00/0000:00:03.0/virtio0")
	f.write(dir+"/operstate", "up")
	f.write(dir+"/type", "1")
	f.write(dir+"/speed", "-1")
	f.link("class/net/eth0", dir)
	f.pci("pci0000:00/0000:00:04.0", "0x10de", "0x1eb8", "0x030200", -1)
	f.netdev("docker0", "", "up", "", arphrdEther)
	f.netdev("veth3f2a1b", "", "up", "10000", arphrdEther)
	f.netdev("lo", "", "unknown", "", arphrdLoopback)
}
