package netopt

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// RDMADevice is one device of class/infiniband (an HCA or RoCE NIC).
type RDMADevice struct {
	Name    string     `json:"name"`
	PCIAddr string     `json:"pci_addr,omitempty"`
	Ports   []RDMAPort `json:"ports"`
}

// RDMAPort is one port of an RDMA device.
type RDMAPort struct {
	Port int `json:"port"`
	// State is the port state without its number: "ACTIVE", "DOWN", "INIT".
	State string `json:"state"`
	// RateGbps is the signalling rate; 0 when unreadable.
	RateGbps float64 `json:"rate_gbps"`
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string `json:"link_layer"`
	// GIDs are the populated entries of the port's GID table.
	GIDs []GID `json:"gids,omitempty"`
}

// GID is one populated GID table entry.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	// Type is "RoCE v2" or "IB/RoCE v1" as the kernel writes it; empty
	// when it could not be read.
	Type string `json:"type,omitempty"`
	// NetDev is the interface the entry belongs to (RoCE only).
	NetDev string `json:"netdev,omitempty"`
	// IPv4 is set when the GID is an IPv4-mapped address (::ffff:a.b.c.d).
	IPv4 string `json:"ipv4,omitempty"`
}

const (
	linkLayerIB       = "InfiniBand"
	linkLayerEthernet = "Ethernet"
	gidTypeRoCEv2     = "RoCE v2"
)

// Active reports whether the port can carry traffic.
func (p RDMAPort) Active() bool { return p.State == "ACTIVE" }

// readRDMA reads class/infiniband.
func readRDMA(s *sysfs) []RDMADevice {
	var out []RDMADevice
	for _, name := range s.list("class/infiniband") {
		dir := "class/infiniband/" + name
		dev := RDMADevice{Name: name}
		if chain, ok := s.pciChain(dir + "/device"); ok {
			dev.PCIAddr = chain[len(chain)-1]
		}
		for _, p := range s.list(dir + "/ports") {
			num, err := strconv.Atoi(p)
			if err != nil || num < 1 {
				continue
			}
			if port, ok := readRDMAPort(s, dir+"/ports/"+p, num); ok {
				dev.Ports = append(dev.Ports, port)
			}
		}
		out = append(out, dev)
	}
	return out
}

// readRDMAPort reads one port. A port without a readable state is skipped:
// whether it is usable is the one thing that must be known.
func readRDMAPort(s *sysfs, dir string, num int) (RDMAPort, bool) {
	port := RDMAPort{Port: num}
	state, ok := s.required(dir+"/state", "port skipped")
	if !ok {
		return port, false
	}
	// "4: ACTIVE"
	_, port.State, _ = strings.Cut(state, ": ")
	port.State = strings.TrimSpace(port.State)
	if port.State == "" {
		s.warnf(dir+"/state", "unexpected value %q; port skipped", clip(state))
		return port, false
	}
	port.LinkLayer = s.optional(dir + "/link_layer")
	if port.LinkLayer == "" {
		port.LinkLayer = linkLayerIB // kernels before link_layer existed were IB only
	}
	if rate, ok := s.required(dir+"/rate", "rate taken as unknown"); ok {
		// "200 Gb/sec (4X HDR)"
		f, err := strconv.ParseFloat(strings.Fields(rate)[0], 64)
		if err != nil || f <= 0 || !strings.Contains(rate, "Gb/sec") {
			s.warnf(dir+"/rate", "unexpected value %q; rate taken as unknown", clip(rate))
		} else {
			port.RateGbps = f
		}
	}
	port.GIDs = readGIDs(s, dir)
	return port, true
}

// readGIDs reads the populated entries of a port's GID table. Empty slots
// (all zeros) are skipped quietly: the kernel answers EINVAL for their
// types, which is normal. A populated entry whose type cannot be read is
// kept without a type, with a warning, so that it is never taken for RoCE v2.
func readGIDs(s *sysfs, port string) []GID {
	var out []GID
	for _, name := range s.list(port + "/gids") {
		idx, err := strconv.Atoi(name)
		if err != nil || idx < 0 {
			continue
		}
		rel := port + "/gids/" + name
		raw, err := s.read(rel)
		if err != nil {
			s.warnf(rel, "unreadable (%s), entry skipped", shortErr(err))
			continue
		}
		addr, err := netip.ParseAddr(raw)
		if err != nil {
			s.warnf(rel, "unexpected value %q, entry skipped", clip(raw))
			continue
		}
		if addr.IsUnspecified() {
			continue
		}
		g := GID{Index: idx, GID: raw}
		if addr.Is4In6() {
			g.IPv4 = addr.Unmap().String()
		}
		typ, err := s.read(port + "/gid_attrs/types/" + name)
		if err != nil {
			s.warnf(port+"/gid_attrs/types/"+name, "unreadable (%s); GID %d has no known type and is not used", shortErr(err), idx)
		} else {
			g.Type = typ
		}
		g.NetDev, _ = s.read(port + "/gid_attrs/ndevs/" + name)
		out = append(out, g)
	}
	// Directory order is by name (10 before 2).
	slices.SortFunc(out, func(a, b GID) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
