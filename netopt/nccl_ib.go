package netopt

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// hcaPort is one RDMA port NCCL should use.
type hcaPort struct {
	dev  RDMADevice
	port RDMAPort
	// gid is the RoCE v2 IPv4 entry of an Ethernet port; nil for InfiniBand.
	gid *GID
}

func (p hcaPort) String() string { return fmt.Sprintf("%s:%d", p.dev.Name, p.port.Port) }

// chooseRDMAPorts returns the ports NCCL's IB transport can really use:
// active, InfiniBand or RoCE with a RoCE v2 IPv4 GID, and openable through
// /dev/infiniband. It returns nil, with a warning saying why, when NCCL will
// fall back to sockets.
func chooseRDMAPorts(r *recommendation, h *Host) (ports []hcaPort, note string) {
	if len(h.RDMA) == 0 {
		r.warn("no RDMA device found: NCCL uses TCP sockets (NCCL_SOCKET_IFNAME)")
		return nil, ""
	}
	var ib, roce []hcaPort
	for _, d := range h.RDMA {
		for _, p := range d.Ports {
			hp := hcaPort{dev: d, port: p}
			switch {
			case !p.Active():
				r.warn(fmt.Sprintf("%s port state is %s: left out of NCCL_IB_HCA", hp, p.State))
			case p.LinkLayer == linkLayerIB:
				ib = append(ib, hp)
			case p.LinkLayer == linkLayerEthernet:
				roce = append(roce, hp)
			default:
				r.warn(fmt.Sprintf("%s has link layer %q, which NCCL's IB transport does not drive: left out", hp, p.LinkLayer))
			}
		}
	}
	ports = ib
	if len(ib) == 0 {
		ports = withRoCEv2GID(r, roce)
	} else if len(roce) > 0 {
		note = "; Ethernet (RoCE) ports " + joinPorts(roce) + " left out: the InfiniBand fabric carries NCCL"
	}
	if len(ports) == 0 {
		if len(ib)+len(roce) == 0 {
			r.warn("RDMA devices found but no port is ACTIVE: NCCL falls back to TCP sockets")
		} else {
			r.warn("no RDMA port is usable by NCCL's IB transport: NCCL_NET and NCCL_IB_HCA not set, NCCL decides by itself (it may try the devices, or fall back to TCP sockets)")
		}
		return nil, ""
	}
	if !h.DevInfiniband {
		r.warn(fmt.Sprintf("RDMA ports %s are active but /dev/infiniband has no uverbs device (not mounted into the container?): NCCL cannot open them and falls back to TCP sockets; mount /dev/infiniband or request the RDMA device plugin's resource", joinPorts(ports)))
		return nil, ""
	}
	return ports, note
}

// withRoCEv2GID keeps the RoCE ports that have a RoCE v2 GID for an IPv4
// address, the entry NCCL must use to be routable across subnets. Its index
// depends on how many addresses and VLANs the NIC has, so it is read from
// the GID table, never assumed.
func withRoCEv2GID(r *recommendation, ports []hcaPort) []hcaPort {
	var out []hcaPort
	for _, hp := range ports {
		for _, g := range hp.port.GIDs {
			if g.Type == gidTypeRoCEv2 && g.IPv4 != "" {
				hp.gid = &g
				break
			}
		}
		if hp.gid == nil {
			r.warn(fmt.Sprintf("%s is RoCE but its GID table has no RoCE v2 IPv4 entry (no IPv4 address on its interface?): left out of NCCL_IB_HCA", hp))
			continue
		}
		out = append(out, hp)
	}
	return out
}

// chooseIB sets the variables of NCCL's IB transport for ports.
func chooseIB(r *recommendation, h *Host, cfg Config, ports []hcaPort, note string) {
	kind := "InfiniBand"
	if ports[0].gid != nil {
		kind = "RoCE"
	}
	r.set("NCCL_NET", "IB", fmt.Sprintf("%d active %s port(s) and /dev/infiniband present: use the RDMA transport, and fail loudly rather than fall back to sockets", len(ports), kind))
	r.set("NCCL_IB_HCA", "="+joinPorts(ports), "the active ports, by exact name (the '=' prefix keeps mlx5_1 from also matching mlx5_10) and port"+note)
	if kind == "RoCE" {
		chooseGIDIndex(r, ports)
	}
	if cfg.IBTrafficClass >= 0 {
		r.set("NCCL_IB_TC", strconv.Itoa(cfg.IBTrafficClass), "traffic class asked for in the configuration")
	}
	if cfg.IBServiceLevel >= 0 {
		r.set("NCCL_IB_SL", strconv.Itoa(cfg.IBServiceLevel), "service level asked for in the configuration")
	}
	warnMixedRates(r, ports)
	chooseGDR(r, h, ports)
	chooseCrossNIC(r, h, cfg, ports)
}

// chooseGIDIndex sets NCCL_IB_GID_INDEX when every RoCE port has its
// RoCE v2 IPv4 entry at the same index: NCCL takes one index for all.
func chooseGIDIndex(r *recommendation, ports []hcaPort) {
	idx := ports[0].gid.Index
	var where []string
	for _, hp := range ports {
		if hp.gid.Index != idx {
			var all []string
			for _, p := range ports {
				all = append(all, fmt.Sprintf("%s at %d", p, p.gid.Index))
			}
			r.warn(fmt.Sprintf("the RoCE v2 IPv4 GID sits at different indexes (%s): NCCL_IB_GID_INDEX not set; NCCL 2.21 and later pick each device's RoCE v2 IPv4 GID themselves", strings.Join(all, ", ")))
			return
		}
		where = append(where, fmt.Sprintf("%s %s on %s", hp, hp.gid.IPv4, cmp.Or(hp.gid.NetDev, "?")))
	}
	r.set("NCCL_IB_GID_INDEX", strconv.Itoa(idx), fmt.Sprintf("RoCE v2 GID of an IPv4 address, found at index %d of the GID table (%s)", idx, strings.Join(where, "; ")))
}

// warnMixedRates warns when the chosen ports run at different rates: a ring
// runs at the pace of its slowest link.
func warnMixedRates(r *recommendation, ports []hcaPort) {
	distinct := map[float64]bool{}
	var rates []string
	for _, hp := range ports {
		if hp.port.RateGbps > 0 {
			distinct[hp.port.RateGbps] = true
			rates = append(rates, fmt.Sprintf("%s %g Gb/s", hp, hp.port.RateGbps))
		}
	}
	if len(distinct) > 1 {
		r.warn(fmt.Sprintf("mixed link speeds (%s): rings run at the slowest link's pace", strings.Join(rates, ", ")))
	}
}

// chooseGDR sets NCCL_NET_GDR_LEVEL so that every GPU's nearest NIC reads
// GPU memory directly. It claims nothing without a peer-memory module.
func chooseGDR(r *recommendation, h *Host, ports []hcaPort) {
	if len(h.GPUs) == 0 {
		return
	}
	if h.PeerMemory == "" {
		r.warn("GPUDirect RDMA off: no peer-memory module (nvidia_peermem or nv_peer_mem) is loaded, so NICs read GPU memory only where NCCL can use DMA-BUF (NCCL 2.19+, Linux 5.12+, open GPU kernel modules) and otherwise every transfer is staged through host memory; load nvidia_peermem. NCCL_NET_GDR_LEVEL not set")
		return
	}
	worst, worstGPU := PathPIX, h.GPUs[0].Addr
	for _, g := range h.GPUs {
		if best := nearestNIC(h, g.Addr, ports); best > worst {
			worst, worstGPU = best, g.Addr
		}
	}
	switch {
	case worst == PathUnknown:
		r.warn(fmt.Sprintf("the PCIe path from GPU %s to the RDMA NICs is unknown: NCCL_NET_GDR_LEVEL left to NCCL's default", worstGPU))
		return
	case worst > PathPXB:
		r.warn(fmt.Sprintf("GPU %s's nearest RDMA NIC is at %s, through the CPU: GPUDirect RDMA over that path is usually slower than staging, NCCL_NET_GDR_LEVEL left to NCCL's default", worstGPU, worst))
		return
	}
	r.set("NCCL_NET_GDR_LEVEL", worst.String(), fmt.Sprintf("%s loaded and every GPU has an RDMA NIC at %s or closer: GPUDirect RDMA between each GPU and its nearest NIC", h.PeerMemory, worst))
}

// nearestNIC returns the closest path from a GPU to any of ports.
func nearestNIC(h *Host, gpu string, ports []hcaPort) PathType {
	best := PathUnknown
	for _, p := range h.Paths {
		if p.GPU == gpu && p.Path < best && slices.ContainsFunc(ports, func(hp hcaPort) bool { return hp.dev.Name == p.NIC }) {
			best = p.Path
		}
	}
	return best
}

// chooseCrossNIC sets NCCL_CROSS_NIC. On a rail-optimized fabric NIC i of
// every node hangs off leaf switch i, so a ring that leaves one node on NIC
// 2 and enters the next on NIC 5 crosses the spine.
func chooseCrossNIC(r *recommendation, h *Host, cfg Config, ports []hcaPort) {
	devs := map[string]bool{}
	for _, hp := range ports {
		devs[hp.dev.Name] = true
	}
	if len(devs) < 2 {
		return
	}
	switch cfg.Fabric {
	case FabricRail:
		r.set("NCCL_CROSS_NIC", "0", "fabric configured as rail-optimized: rings keep the same NIC index on every node")
	case FabricFlat:
		r.set("NCCL_CROSS_NIC", "1", "fabric configured as flat: rings may change NIC between nodes")
	case FabricAuto:
		if len(h.GPUs) < 2 {
			return
		}
		for _, g := range h.GPUs {
			if nearestNIC(h, g.Addr, ports) > PathPXB {
				return
			}
		}
		r.set("NCCL_CROSS_NIC", "0", fmt.Sprintf("each of the %d GPUs has an RDMA NIC behind its own PCIe switch (%d NICs), the layout rail-optimized fabrics are cabled for: rings keep the same NIC index on every node so they never cross rails; configure the fabric as flat if all NICs share one switch", len(h.GPUs), len(devs)))
	}
}

// joinPorts writes ports as NCCL_IB_HCA wants them: mlx5_0:1,mlx5_1:1.
func joinPorts(ports []hcaPort) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
