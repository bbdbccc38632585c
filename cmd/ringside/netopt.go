package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/netopt"
)

// newNetoptCmd wires the netopt package: node detection, NCCL settings and
// ring planning.
func newNetoptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "netopt",
		Short: "Detect the node's network, tune NCCL for it, plan topology-aware rings",
		Long: `netopt reads the node's network and GPU topology from sysfs, chooses NCCL
settings for it (each with the reason it was chosen, and warnings for what
will cost bandwidth), and plans all-reduce rings that cross every topology
domain boundary as rarely as possible.

The sidecar does the same for every member and hands the settings to the
trainers in the rendezvous answer; these commands show what it would do.`,
	}
	cmd.AddCommand(newNetoptDetectCmd(), newNetoptEnvCmd(), newNetoptPlanCmd(), newNetoptGenClusterCmd())
	return cmd
}

// netoptPaths are the paths detect and env read.
type netoptPaths struct {
	sysfsRoot, devRoot string
}

func (f *netoptPaths) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.sysfsRoot, "sysfs-root", "/sys", "directory that stands for /sys (a fixture tree, or the host's sysfs mounted elsewhere)")
	cmd.Flags().StringVar(&f.devRoot, "dev-root", "/dev", "directory that stands for /dev (where infiniband/uverbs* are looked for)")
}

func (f *netoptPaths) config() netopt.Config {
	cfg := netopt.DefaultConfig()
	cfg.SysfsRoot, cfg.DevRoot = f.sysfsRoot, f.devRoot
	return cfg
}

func newNetoptDetectCmd() *cobra.Command {
	var paths netoptPaths
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "detect",
		Short: "Show the node's GPUs, NICs, RDMA ports, NUMA nodes and GPU-NIC PCIe paths",
		Long: `detect reads sysfs and prints what netopt sees: GPUs and NVSwitches, NUMA
nodes, network interfaces, RDMA ports with their GID tables, the PCIe path
between every GPU and NIC (PIX, PXB, PHB, NODE, SYS as in nvidia-smi topo -m),
the peer-memory module and /dev/infiniband. Files it could not read are
listed as warnings.`,
		Example: `  ringside netopt detect
  ringside netopt detect --json
  ringside netopt detect --sysfs-root /host/sys --dev-root /host/dev`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := netopt.Detect(cmd.Context(), paths.config())
			if err != nil {
				return fmt.Errorf("detect: %w", err)
			}
			if asJSON {
				return netoptWriteJSON(cmd.OutOrStdout(), h)
			}
			return netoptPrintHost(cmd.OutOrStdout(), h)
		},
	}
	paths.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func newNetoptEnvCmd() *cobra.Command {
	var paths netoptPaths
	var format, fabric string
	var tc, sl int
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print the NCCL settings chosen for this node",
		Long: `env detects the node (as detect does) and prints the NCCL settings netopt
chooses, each preceded by the reason for it:

  env   KEY=VALUE lines, for docker --env-file, systemd or a ConfigMap
  conf  the file NCCL reads from NCCL_CONF_FILE (environment variables win)
  xml   an NCCL topology file for NCCL_TOPO_FILE, in NCCL's own grammar

Warnings (no peer memory, no /dev/infiniband, only virtual interfaces,
mixed link speeds, files that could not be read) go to stderr too.`,
		Example: `  ringside netopt env > nccl.env
  ringside netopt env --format conf > /etc/nccl.conf
  ringside netopt env --format xml > topo.xml && export NCCL_TOPO_FILE=$PWD/topo.xml
  ringside netopt env --fabric rail --ib-tc 106`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := paths.config()
			cfg.Fabric, cfg.IBTrafficClass, cfg.IBServiceLevel = netopt.Fabric(fabric), tc, sl
			if err := netoptCheckEnvFlags(format, cfg); err != nil {
				return err
			}
			h, err := netopt.Detect(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("detect: %w", err)
			}
			s := netopt.Recommend(h, cfg)
			for _, w := range s.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			switch format {
			case "conf":
				return netopt.WriteConfFile(cmd.OutOrStdout(), s)
			case "xml":
				return netopt.WriteTopologyXML(cmd.OutOrStdout(), h)
			default:
				return netopt.WriteEnvFile(cmd.OutOrStdout(), s)
			}
		},
	}
	paths.register(cmd)
	cmd.Flags().StringVar(&format, "format", "env", "output format: env, conf or xml")
	cmd.Flags().StringVar(&fabric, "fabric", string(netopt.FabricAuto), "how the RDMA NICs are cabled: auto, rail (NIC i of every node on leaf i) or flat")
	cmd.Flags().IntVar(&tc, "ib-tc", -1, "set NCCL_IB_TC to this traffic class (0-255); -1 leaves it unset")
	cmd.Flags().IntVar(&sl, "ib-sl", -1, "set NCCL_IB_SL to this service level (0-15); -1 leaves it unset")
	return cmd
}

// netoptCheckEnvFlags names the flag that is wrong.
func netoptCheckEnvFlags(format string, cfg netopt.Config) error {
	var errs []error
	switch format {
	case "env", "conf", "xml":
	default:
		errs = append(errs, fmt.Errorf("--format must be env, conf or xml, got %q", format))
	}
	switch cfg.Fabric {
	case netopt.FabricAuto, netopt.FabricRail, netopt.FabricFlat:
	default:
		errs = append(errs, fmt.Errorf("--fabric must be auto, rail or flat, got %q", cfg.Fabric))
	}
	if cfg.IBTrafficClass < -1 || cfg.IBTrafficClass > 255 {
		errs = append(errs, fmt.Errorf("--ib-tc must be 0-255 (or -1 to leave it unset), got %d", cfg.IBTrafficClass))
	}
	if cfg.IBServiceLevel < -1 || cfg.IBServiceLevel > 15 {
		errs = append(errs, fmt.Errorf("--ib-sl must be 0-15 (or -1 to leave it unset), got %d", cfg.IBServiceLevel))
	}
	return errors.Join(errs...)
}

// netoptPlanResult is the one-line JSON of `netopt plan --json`.
type netoptPlanResult struct {
	Members  int                 `json:"members"`
	Levels   []netopt.LevelStats `json:"levels"`
	PlanMS   float64             `json:"plan_ms"`
	Modelled struct {
		Planned float64 `json:"planned"`
		Given   float64 `json:"given"`
	} `json:"modelled_allreduce_s"`
	Order []string `json:"order,omitempty"`
}

func newNetoptPlanCmd() *cobra.Command {
	var clusterFile string
	var asJSON, withOrder bool
	var bytes float64
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan a topology-aware ring order for a cluster and model its all-reduce time",
		Long: `plan reads a cluster file, a JSON array of members with their topology path
(broad to narrow, the same depth for every member) and slots (ranks):

  [{"id": "w0", "topology": ["zone-a", "block-1", "rack-3", "host-7"], "slots": 8}, ...]

and orders the ring as the coordinator would for a fresh job. It prints the
order, the domains and cross-domain ring edges of every level (at best each
domain is crossed once in and once out: cross edges = domains), and the
all-reduce time the alpha-beta model gives for the planned order and for the
order of the file. The model lets the slowest edge pace the ring; an edge's
bandwidth is its share of the uplinks of the domains it leaves.

With --json it prints one line:
  {"members":..,"levels":[{"level":0,"domains":..,"cross_edges":..},...],"plan_ms":..,"modelled_allreduce_s":{"planned":..,"given":..}}`,
		Example: `  ringside netopt gen-cluster --members 4096 --levels 2 --seed 1 > c.json
  ringside netopt plan --cluster c.json
  ringside netopt plan --cluster c.json --json
  ringside netopt plan --cluster - --json --with-order < c.json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			model := netopt.DefaultCostModel()
			model.Bytes = bytes
			if err := model.Validate(); err != nil {
				return fmt.Errorf("--bytes: %w", err)
			}
			cluster, err := netoptReadCluster(cmd.InOrStdin(), clusterFile)
			if err != nil {
				return err
			}
			given := netopt.Members(cluster)
			start := time.Now()
			planned := netopt.NewOrderer().Order(nil, given)
			elapsed := time.Since(start)
			if asJSON {
				r := netoptPlanResult{Members: len(planned), Levels: netopt.RingLevels(planned), PlanMS: netoptRound(elapsed.Seconds()*1000, 3)}
				r.Modelled.Planned = netoptRound(model.AllReduce(planned).Seconds, 6)
				r.Modelled.Given = netoptRound(model.AllReduce(given).Seconds, 6)
				if withOrder {
					for _, m := range planned {
						r.Order = append(r.Order, m.ID)
					}
				}
				return netoptWriteJSON(cmd.OutOrStdout(), r)
			}
			return netoptPrintPlan(cmd.OutOrStdout(), model, given, planned, elapsed)
		},
	}
	cmd.Flags().StringVar(&clusterFile, "cluster", "", "cluster file (JSON array of members); - reads stdin")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON line")
	cmd.Flags().BoolVar(&withOrder, "with-order", false, "with --json, add the planned order of ids as \"order\"")
	cmd.Flags().Float64Var(&bytes, "bytes", netopt.DefaultCostModel().Bytes, "size in bytes of the all-reduced buffer in the model")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

// netoptReadCluster reads and checks the cluster file; "-" is stdin.
func netoptReadCluster(stdin io.Reader, name string) ([]netopt.ClusterMember, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("open cluster file: %w", err)
		}
		defer f.Close()
		r = f
	}
	cluster, err := netopt.ReadCluster(r)
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %w", name, err)
	}
	return cluster, nil
}

func newNetoptGenClusterCmd() *cobra.Command {
	spec := netopt.ClusterSpec{Members: 4096, Levels: 2, Fanout: 8, Slots: 8}
	var seed uint64
	cmd := &cobra.Command{
		Use:   "gen-cluster",
		Short: "Print a generated cluster file, in shuffled order, for plan",
		Long: `gen-cluster prints a cluster file for plan: --members hosts, each one member
with --slots ranks, under a tree of --levels levels whose narrowest level is
the host; going up, every domain holds --fanout domains of the level below
(hosts per rack, racks per block, blocks per zone, ...) and the broadest
level takes the rest. Members are shuffled with --seed, as if they had
joined in random order.`,
		Example: `  ringside netopt gen-cluster --members 4096 --levels 2 --seed 1 > c2.json
  ringside netopt gen-cluster --members 4096 --levels 4 --fanout 8 --seed 1 > c4.json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cluster, err := netopt.GenerateCluster(spec, rand.New(rand.NewPCG(seed, seed)))
			if err != nil {
				return fmt.Errorf("gen-cluster: %w", err)
			}
			return netoptWriteCluster(cmd.OutOrStdout(), cluster)
		},
	}
	cmd.Flags().IntVar(&spec.Members, "members", spec.Members, "number of members (hosts)")
	cmd.Flags().IntVar(&spec.Levels, "levels", spec.Levels, "topology depth, the host level included")
	cmd.Flags().IntVar(&spec.Fanout, "fanout", spec.Fanout, "domains of one level inside each domain of the level above")
	cmd.Flags().IntVar(&spec.Slots, "slots", spec.Slots, "ranks per member")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the shuffle")
	return cmd
}

// netoptWriteCluster writes one member per line, so the file diffs and greps well.
func netoptWriteCluster(w io.Writer, cluster []netopt.ClusterMember) error {
	var b strings.Builder
	b.WriteString("[\n")
	for i, m := range cluster {
		line, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode member: %w", err)
		}
		b.Write(line)
		if i < len(cluster)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func netoptWriteJSON(w io.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

func netoptRound(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// netoptPrintPlan writes the human-readable plan.
func netoptPrintPlan(w io.Writer, model netopt.CostModel, given, planned []record.MemberInfo, elapsed time.Duration) error {
	p, g := model.AllReduce(planned), model.AllReduce(given)
	fmt.Fprintf(w, "planned a ring of %d members (%d ranks) in %.3f ms\n\n", len(planned), p.Ranks, elapsed.Seconds()*1000)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "level\tdomains\tcross edges planned\tcross edges given")
	gl := netopt.RingLevels(given)
	for i, l := range netopt.RingLevels(planned) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\n", l.Level, l.Domains, l.CrossEdges, gl[i].CrossEdges)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nmodelled all-reduce of %s (alpha-beta; the slowest edge paces the ring):\n", netoptBytes(model.Bytes))
	for _, e := range []struct {
		name string
		est  netopt.Estimate
	}{{"planned", p}, {"given", g}} {
		fmt.Fprintf(w, "  %-8s %.6f s  (bandwidth %.6f s at %.4g GB/s, latency %.6f s at %.1f us per step; slowest edge %s)\n",
			e.name, e.est.Seconds, e.est.BandwidthSeconds, e.est.MinBandwidth/1e9, e.est.LatencySeconds, e.est.MaxLatency*1e6, e.est.Bottleneck)
	}
	fmt.Fprintln(w, "\nring order:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  first rank\tid\tslots\ttopology")
	rank := 0
	for _, m := range planned {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", rank, m.ID, m.Slots, strings.Join(m.Topology, "/"))
		rank += m.Slots
	}
	return tw.Flush()
}

func netoptBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.4g %s", b, units[i])
}

// netoptPrintHost writes the human-readable detection report.
func netoptPrintHost(w io.Writer, h *netopt.Host) error {
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
		return err
	}
	if len(h.GPUs) > 0 && len(h.RDMA) > 0 {
		netoptPrintPaths(w, h)
	}
	peer := h.PeerMemory
	if peer == "" {
		peer = "none"
	}
	devIB := "absent"
	if h.DevInfiniband {
		devIB = "present"
	}
	fmt.Fprintf(w, "Peer memory: %s\n/dev/infiniband: %s\n", peer, devIB)
	if len(h.Warnings) > 0 {
		fmt.Fprintln(w, "Warnings:")
		for _, warning := range h.Warnings {
			fmt.Fprintf(w, "  - %s\n", warning)
		}
	}
	return nil
}

// netoptPrintPaths prints GPU rows by NIC columns, as nvidia-smi topo -m does.
func netoptPrintPaths(w io.Writer, h *netopt.Host) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "GPU-NIC paths:")
	for _, d := range h.RDMA {
		fmt.Fprintf(tw, "\t%s", d.Name)
	}
	fmt.Fprintln(tw)
	path := map[[2]string]netopt.PathType{}
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
	_ = tw.Flush()
}
