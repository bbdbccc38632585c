// Package footprint keeps the sidecar process small and quiet: it sets the
// Go runtime up for a long-running agent that idles most of its life next
// to a trainer that wants every core and every byte, and it gives back the
// memory that only starting up needed.
//
// Why a package of its own: ringside is one binary. Every package linked
// into it runs its init in every subcommand, the sidecar's included, so the
// etcd server (linked for `ringside etcd`), client-go, gRPC and the rest
// register metrics, build tables and page in code the sidecar never calls.
// Those pages are clean pages of the executable, shared with every other
// sidecar on the node, but each process that touched them counts them in
// its resident set, and the kernel maps them in blocks (fault-around), so a
// few bytes read by an init function count as tens of KiB. ReleaseStartupPages
// unmaps them once the sidecar runs; what the running sidecar uses comes
// back on its next access, the rest stays out. The cost of whatever is
// linked later is thereby bounded by the heap its init leaves behind, which
// Config's GC settings keep tight.
//
// Read Config and DefaultConfig first: each setting, its unit, and the
// measurement behind its default.
package footprint
