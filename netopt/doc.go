// Package netopt reads a node's network and GPU topology and turns it into
// tuned NCCL settings, and orders the members of an all-reduce ring by their
// place in the network.
//
// Read it in this order:
//
//   - Detect reads sysfs (a root path stands for /sys, so tests use fixture
//     trees) into a Host: interfaces, RDMA ports and their GID tables, GPUs,
//     NVSwitches, NUMA nodes and the PCIe path between every GPU and NIC.
//   - Recommend turns a Host into Settings: NCCL environment variables, each
//     with the reason it was chosen, and warnings for what will make NCCL slow.
//     WriteEnvFile, WriteConfFile and WriteTopologyXML render them (Format
//     picks one by name); WriteHostReport shows a Host to people.
//   - TopologyFromLabels turns Kubernetes node labels into a topology path,
//     broad to narrow, for record.MemberInfo.Topology.
//   - Orderer implements coordinator.RingOrderer: each topology domain stays
//     contiguous in the ring, so the ring crosses every domain boundary the
//     minimum number of times, and survivors keep their relative order.
//   - CostModel estimates ring all-reduce time over a ring's edges with the
//     alpha-beta model; RingLevels counts the edges that cross each level.
//   - ReadCluster, WriteCluster and GenerateCluster handle cluster files;
//     PlanCluster orders one and reports it (Plan.WriteText, Plan.Summary).
//
// Config.Validate reports each bad field as a *FieldError, so that the
// command line names the flag instead of the field.
//
// Nothing here blocks except Detect, which only reads files.
package netopt
