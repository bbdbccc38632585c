package netopt

import (
	"fmt"
	"strings"
)

// PCIDevice is one device of the PCI tree.
type PCIDevice struct {
	// Addr is the bus address, "0000:1a:00.0".
	Addr   string `json:"addr"`
	Vendor string `json:"vendor"`
	Device string `json:"device,omitempty"`
	Class  string `json:"class"`
	// NUMANode is the node the device is attached to; -1 when the platform
	// does not say.
	NUMANode int `json:"numa_node"`
	// chain is the device's place in the PCI tree, root complex first and the
	// device last; nil when sysfs did not show it.
	chain []string
}

const (
	vendorNVIDIA = "0x10de"
	// classGPU3D and classGPUVGA are the PCI class prefixes of data-center
	// (3D controller) and display (VGA) GPUs; classNVSwitch is "bridge, other".
	classGPU3D    = "0x0302"
	classGPUVGA   = "0x0300"
	classNVSwitch = "0x0680"
	classBridge   = "0x0604"
)

// IsGPU reports whether d is an NVIDIA GPU.
func (d PCIDevice) IsGPU() bool {
	return d.Vendor == vendorNVIDIA && (strings.HasPrefix(d.Class, classGPU3D) || strings.HasPrefix(d.Class, classGPUVGA))
}

// IsNVSwitch reports whether d is an NVIDIA NVSwitch.
func (d PCIDevice) IsNVSwitch() bool {
	return d.Vendor == vendorNVIDIA && strings.HasPrefix(d.Class, classNVSwitch)
}

// readPCIDevices reads every entry of bus/pci/devices. Devices whose vendor
// or class cannot be read are skipped with a warning: without them nothing
// can be said about the device.
func readPCIDevices(s *sysfs) map[string]PCIDevice {
	devs := make(map[string]PCIDevice)
	for _, addr := range s.list("bus/pci/devices") {
		if !bdfPattern.MatchString(addr) {
			continue
		}
		dir := "bus/pci/devices/" + addr
		vendor, ok := s.required(dir+"/vendor", "device skipped")
		if !ok {
			continue
		}
		class, ok := s.required(dir+"/class", "device skipped")
		if !ok {
			continue
		}
		numa, ok := s.int(dir+"/numa_node", "NUMA node taken as unknown")
		if !ok {
			numa = -1
		}
		chain, _ := s.pciChain(dir)
		devs[addr] = PCIDevice{
			Addr:     addr,
			Vendor:   strings.ToLower(vendor),
			Device:   strings.ToLower(s.optional(dir + "/device")),
			Class:    strings.ToLower(class),
			NUMANode: numa,
			chain:    chain,
		}
	}
	return devs
}

// PathType is the kind of PCIe path between two devices, with the names
// nvidia-smi topo -m uses, from closest to farthest.
type PathType int

const (
	// PathPIX crosses at most one PCIe switch.
	PathPIX PathType = iota
	// PathPXB crosses several PCIe switches but no host bridge.
	PathPXB
	// PathPHB crosses a PCIe host bridge (the CPU's root complex).
	PathPHB
	// PathNODE crosses between host bridges of one NUMA node.
	PathNODE
	// PathSYS crosses the interconnect between NUMA nodes.
	PathSYS
	// PathUnknown means sysfs did not show where a device sits.
	PathUnknown
)

var pathNames = [...]string{"PIX", "PXB", "PHB", "NODE", "SYS", "unknown"}

func (p PathType) String() string {
	if p < 0 || int(p) >= len(pathNames) {
		return fmt.Sprintf("PathType(%d)", int(p))
	}
	return pathNames[p]
}

// MarshalText writes the nvidia-smi name.
func (p PathType) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// pciPath classifies the path between a and b. A PCIe switch shows in sysfs
// as an upstream port with one downstream port per link, so a device below
// a switch sits two components below the switch's upstream port: when both
// devices are at most two components below their lowest common ancestor they
// share one switch (PIX), as NCCL and nvidia-smi count it.
func pciPath(a, b PCIDevice, numaNodes int) PathType {
	if len(a.chain) == 0 || len(b.chain) == 0 {
		return PathUnknown
	}
	if a.chain[0] != b.chain[0] {
		if (a.NUMANode >= 0 && a.NUMANode == b.NUMANode) || numaNodes <= 1 {
			return PathNODE
		}
		return PathSYS
	}
	common := 0
	for common < len(a.chain) && common < len(b.chain) && a.chain[common] == b.chain[common] {
		common++
	}
	if common == 1 {
		return PathPHB
	}
	if len(a.chain)-common <= 2 && len(b.chain)-common <= 2 {
		return PathPIX
	}
	return PathPXB
}
