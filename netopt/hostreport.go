package netopt

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteHostReport writes what Detect found for people: GPUs and
// NVSwitches, NUMA nodes, interfaces, RDMA ports with their IPv4 GIDs, the
// GPU-NIC PCIe paths as a matrix, peer memory, /dev/infiniband and the
// warnings. It is the output of `ringside netopt detect`.
func WriteHostReport(w io.Writer, h *Host) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "GPUs: %d\tNVSwitches: %d\n", len(h.GPUs), len(h.NVSwitches))
	for i, g := range h.GPUs {
		fmt.Fprintf(tw, "  GPU%d\t%s\tNUMA %d\n", i, g.Addr, g.NUMANode)
	}
	fmt.Fprintln(tw, "NUMA nodes:")
	if len(h.NUMANodes) == 0 {
		fmt.Fprintln(tw, "  none shown")
	}
	for _, n := range h.NUMANodes {
		fmt.Fprintf(tw, "  node%d\tcpus %s\n", n.ID, n.CPUList)
	}
	fmt.Fprintln(tw, "Interfaces:")
	for _, ifc := range h.Interfaces {
		dev := ifc.PCIAddr
		if ifc.Virtual {
			dev = "virtual"
		}
		speed := "-"
		if ifc.SpeedMbps > 0 {
			speed = fmt.Sprintf("%d Mb/s", ifc.SpeedMbps)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\ttype %d\t%s\n", ifc.Name, ifc.OperState, speed, ifc.Type, dev)
	}
	fmt.Fprintln(tw, "RDMA ports:")
	if len(h.RDMA) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	for _, d := range h.RDMA {
		for _, p := range d.Ports {
			fmt.Fprintf(tw, "  %s:%d\t%s\t%g Gb/s\t%s\t%s\n", d.Name, p.Port, p.State, p.RateGbps, p.LinkLayer, d.PCIAddr)
			for _, g := range p.GIDs {
				if g.IPv4 != "" {
					fmt.Fprintf(tw, "    GID %d\t%s\t%s\t%s\t\n", g.Index, g.Type, g.IPv4, g.NetDev)
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write host report: %w", err)
	}
	if len(h.GPUs) > 0 && len(h.RDMA) > 0 {
		if err := writePathMatrix(w, h); err != nil {
			return err
		}
	}
	peer := h.PeerMemory
	if peer == "" {
		peer = "none"
	}
	devIB := "absent"
	if h.DevInfiniband {
		devIB = "present"
	}
	if _, err := fmt.Fprintf(w, "Peer memory: %s\n/dev/infiniband: %s\n", peer, devIB); err != nil {
		return fmt.Errorf("write host report: %w", err)
	}
	if len(h.Warnings) > 0 {
		fmt.Fprintln(w, "Warnings:")
		for _, warning := range h.Warnings {
			fmt.Fprintf(w, "  - %s\n", warning)
		}
	}
	return nil
}

// writePathMatrix writes GPU rows by NIC columns, as nvidia-smi topo -m does.
func writePathMatrix(w io.Writer, h *Host) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "GPU-NIC paths:")
	for _, d := range h.RDMA {
		fmt.Fprintf(tw, "\t%s", d.Name)
	}
	fmt.Fprintln(tw)
	path := map[[2]string]PathType{}
	for _, p := range h.Paths {
		path[[2]string{p.GPU, p.NIC}] = p.Path
	}
	for i, g := range h.GPUs {
		fmt.Fprintf(tw, "  GPU%d", i)
		for _, d := range h.RDMA {
			fmt.Fprintf(tw, "\t%s", path[[2]string{g.Addr, d.Name}])
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write host report: %w", err)
	}
	return nil
}
