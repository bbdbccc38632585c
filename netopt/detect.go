package netopt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Host is what Detect found on one node.
type Host struct {
	Interfaces []Interface  `json:"interfaces"`
	RDMA       []RDMADevice `json:"rdma"`
	GPUs       []PCIDevice  `json:"gpus"`
	NVSwitches []PCIDevice  `json:"nvswitches"`
	NUMANodes  []NUMANode   `json:"numa_nodes"`
	Paths      []GPUNICPath `json:"gpu_nic_paths,omitempty"`
	// PeerMemory names the loaded peer-memory module (nvidia_peermem or the
	// older nv_peer_mem) that lets NICs read GPU memory; empty when none is.
	PeerMemory string `json:"peer_memory,omitempty"`
	// DevInfiniband is true when DevRoot/infiniband holds uverbs devices,
	// which NCCL needs to open RDMA devices from this process.
	DevInfiniband bool `json:"dev_infiniband"`
	// Warnings lists the files detection had to skip.
	Warnings []string `json:"warnings,omitempty"`

	// pci holds every device read from bus/pci/devices, by address.
	pci map[string]PCIDevice
}

// GPUNICPath is the PCIe path between one GPU and one RDMA device.
type GPUNICPath struct {
	GPU  string   `json:"gpu"`
	NIC  string   `json:"nic"`
	Path PathType `json:"path"`
}

// peerMemoryModules are the kernel modules that provide GPUDirect RDMA: the
// one shipped with the NVIDIA driver and the older Mellanox one.
var peerMemoryModules = []string{"nvidia_peermem", "nv_peer_mem"}

// Detect reads the node's topology from cfg.SysfsRoot and cfg.DevRoot. It
// fails only when the sysfs root cannot be read at all; every file that is
// missing, unreadable or odd is skipped and listed in Host.Warnings.
func Detect(ctx context.Context, cfg Config) (*Host, error) {
	if _, err := os.ReadDir(cfg.SysfsRoot); err != nil {
		return nil, fmt.Errorf("read sysfs root: %w", err)
	}
	s := &sysfs{root: cfg.SysfsRoot}
	h := &Host{pci: readPCIDevices(s)}
	for _, d := range sortedDevices(h.pci) {
		switch {
		case d.IsGPU():
			h.GPUs = append(h.GPUs, d)
		case d.IsNVSwitch():
			h.NVSwitches = append(h.NVSwitches, d)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.NUMANodes = readNUMA(s)
	h.Interfaces = readInterfaces(s)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.RDMA = readRDMA(s)
	for _, m := range peerMemoryModules {
		if s.exists("module/" + m) {
			h.PeerMemory = m
			break
		}
	}
	h.DevInfiniband = hasUverbs(cfg.DevRoot)
	h.Paths = gpuNICPaths(h)
	h.Warnings = s.warnings
	h.nonNil()
	return h, nil
}

// hasUverbs reports whether devRoot/infiniband holds a uverbs device.
func hasUverbs(devRoot string) bool {
	if devRoot == "" {
		return false
	}
	entries, err := os.ReadDir(filepath.Join(devRoot, "infiniband"))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool {
		return strings.HasPrefix(e.Name(), "uverbs")
	})
}

// gpuNICPaths classifies the path from every GPU to every RDMA device.
func gpuNICPaths(h *Host) []GPUNICPath {
	var out []GPUNICPath
	for _, g := range h.GPUs {
		for _, n := range h.RDMA {
			p := PathUnknown
			if nic, ok := h.pci[n.PCIAddr]; ok {
				p = pciPath(g, nic, len(h.NUMANodes))
			}
			out = append(out, GPUNICPath{GPU: g.Addr, NIC: n.Name, Path: p})
		}
	}
	return out
}

// sortedDevices returns the devices in bus address order, the order
// nvidia-smi numbers GPUs in.
func sortedDevices(m map[string]PCIDevice) []PCIDevice {
	out := make([]PCIDevice, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b PCIDevice) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// nonNil makes empty lists empty rather than nil, so JSON shows [] rather
// than null for "none found".
func (h *Host) nonNil() {
	for _, l := range []*[]PCIDevice{&h.GPUs, &h.NVSwitches} {
		if *l == nil {
			*l = []PCIDevice{}
		}
	}
	if h.Interfaces == nil {
		h.Interfaces = []Interface{}
	}
	if h.RDMA == nil {
		h.RDMA = []RDMADevice{}
	}
	if h.NUMANodes == nil {
		h.NUMANodes = []NUMANode{}
	}
}
