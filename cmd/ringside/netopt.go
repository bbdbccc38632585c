package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"github.com/spf13/cobra"

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
				return json.NewEncoder(cmd.OutOrStdout()).Encode(h)
			}
			return netopt.WriteHostReport(cmd.OutOrStdout(), h)
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
			out := netopt.Format(format)
			if err := errors.Join(out.Validate(), cfg.Validate()); err != nil {
				return flagErrors(err, netoptEnvFlags)
			}
			h, err := netopt.Detect(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("detect: %w", err)
			}
			s := netopt.Recommend(h, cfg)
			for _, w := range s.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			return out.Write(cmd.OutOrStdout(), h, s)
		},
	}
	paths.register(cmd)
	cmd.Flags().StringVar(&format, "format", string(netopt.FormatEnv), "output format: env, conf or xml")
	cmd.Flags().StringVar(&fabric, "fabric", string(netopt.FabricAuto), "how the RDMA NICs are cabled: auto, rail (NIC i of every node on leaf i) or flat")
	cmd.Flags().IntVar(&tc, "ib-tc", -1, "set NCCL_IB_TC to this traffic class (0-255); -1 leaves it unset")
	cmd.Flags().IntVar(&sl, "ib-sl", -1, "set NCCL_IB_SL to this service level (0-15); -1 leaves it unset")
	return cmd
}

// netoptEnvFlags names the flag of env that sets each netopt field.
var netoptEnvFlags = fieldFlags{
	"Format":         "--format",
	"SysfsRoot":      "--sysfs-root",
	"Fabric":         "--fabric",
	"IBTrafficClass": "--ib-tc",
	"IBServiceLevel": "--ib-sl",
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
			plan := netopt.PlanCluster(cluster, model)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(plan.Summary(withOrder))
			}
			return plan.WriteText(cmd.OutOrStdout())
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
			return netopt.WriteCluster(cmd.OutOrStdout(), cluster)
		},
	}
	cmd.Flags().IntVar(&spec.Members, "members", spec.Members, "number of members (hosts)")
	cmd.Flags().IntVar(&spec.Levels, "levels", spec.Levels, "topology depth, the host level included")
	cmd.Flags().IntVar(&spec.Fanout, "fanout", spec.Fanout, "domains of one level inside each domain of the level above")
	cmd.Flags().IntVar(&spec.Slots, "slots", spec.Slots, "ranks per member")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the shuffle")
	return cmd
}
