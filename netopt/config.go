package netopt

import (
	"errors"

	"github.com/ringside/ringside/coordinator/record"
)

// Fabric says how a node's RDMA NICs are cabled, which decides NCCL_CROSS_NIC.
type Fabric string

const (
	// FabricAuto treats a node whose GPUs each have a NIC behind the same
	// PCIe switch as rail-optimized (the usual DGX/HGX cabling).
	FabricAuto Fabric = "auto"
	// FabricRail says NIC i of every node is cabled to leaf switch i: rings
	// must not change NIC index between nodes (NCCL_CROSS_NIC=0).
	FabricRail Fabric = "rail"
	// FabricFlat says every NIC reaches every other through one fabric: rings
	// may change NIC index freely (NCCL_CROSS_NIC=1).
	FabricFlat Fabric = "flat"
)

// Config holds every knob of the package. Start from DefaultConfig.
type Config struct {
	// SysfsRoot stands for /sys. Tests point it at a fixture tree; a
	// container that mounts the host's sysfs elsewhere points it there.
	SysfsRoot string
	// DevRoot stands for /dev. NCCL opens DevRoot/infiniband/uverbs* for
	// RDMA; without them it falls back to sockets.
	DevRoot string
	// Fabric decides NCCL_CROSS_NIC; see the constants.
	Fabric Fabric
	// IBTrafficClass sets NCCL_IB_TC (0-255) when at least 0; -1 leaves it
	// to the fabric's default. Only the network's owner knows the right
	// value (a lossless RoCE class, for example), so nothing guesses it.
	IBTrafficClass int
	// IBServiceLevel sets NCCL_IB_SL (0-15) when at least 0; -1 leaves it unset.
	IBServiceLevel int
	// TopologyLabels, when not empty, are the node label keys read by
	// TopologyFromLabels, broad to narrow, instead of the built-in presets.
	TopologyLabels []string
	// Cost is the all-reduce cost model used by plans.
	Cost CostModel
}

// DefaultConfig returns the configuration for a real node: /sys and /dev,
// automatic fabric detection, no traffic class or service level, the label
// presets and DefaultCostModel.
func DefaultConfig() Config {
	return Config{
		SysfsRoot:      "/sys",
		DevRoot:        "/dev",
		Fabric:         FabricAuto,
		IBTrafficClass: -1,
		IBServiceLevel: -1,
		Cost:           DefaultCostModel(),
	}
}

// FieldError is one Config field that Validate rejects, named by its Go
// name so that a command line can name the flag that set it instead
// ("--ib-tc must be ...").
type FieldError = record.FieldError

// Validate reports every field that is out of range, each as a *FieldError
// (the cost model's problems excepted: see CostModel.Validate).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, name, format string, args ...any) {
		errs = append(errs, record.BadField(field, name, format, args...))
	}
	if c.SysfsRoot == "" {
		bad("SysfsRoot", "sysfs root", "is empty")
	}
	switch c.Fabric {
	case FabricAuto, FabricRail, FabricFlat:
	default:
		bad("Fabric", "fabric", "must be %s, %s or %s, got %q", FabricAuto, FabricRail, FabricFlat, c.Fabric)
	}
	if c.IBTrafficClass < -1 || c.IBTrafficClass > 255 {
		bad("IBTrafficClass", "IB traffic class", "must be 0-255 (or -1 to leave it unset), got %d", c.IBTrafficClass)
	}
	if c.IBServiceLevel < -1 || c.IBServiceLevel > 15 {
		bad("IBServiceLevel", "IB service level", "must be 0-15 (or -1 to leave it unset), got %d", c.IBServiceLevel)
	}
	if err := c.Cost.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
