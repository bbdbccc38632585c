// Package preempt tells the sidecar when the Node it runs on is about to be
// taken away, so that it can drain its member before the pod is killed.
//
// Cluster autoscalers, cloud providers' spot-instance handlers and Karpenter
// all announce an imminent node termination the same way: they put a taint on
// the Node, seconds to minutes before the pod receives SIGTERM. Draining on the
// taint rather than on SIGTERM gives the job that much more time to form the
// generation without this member while it still trains.
//
// Read it in this order:
//
//   - DefaultTaints lists the taint keys that mean "this node is going away",
//     each with the reason it is on the list (or, for some near misses, off it).
//   - Config and DefaultConfig say which node to watch and for which taints.
//   - Watch runs an informer on that one Node (a field selector on
//     metadata.name, so the API server sends nothing about other nodes) and
//     calls back once when a listed taint appears, or is already there.
//   - NodeClient is what Watch needs of a client: List and Watch of Nodes.
//     InClusterClient builds one from the pod's service account, or returns
//     ErrNoCredentials, so the sidecar can switch the watch off and rely on
//     SIGTERM alone. It is a REST client with a scheme of Node types only,
//     not client-go's clientset, whose scheme of every API group would
//     cost each sidecar about 20 MiB of memory.
//
// The pod's service account needs "list" and "watch" on "nodes" (a
// ClusterRole: nodes are not namespaced). Without them Watch returns an error
// wrapping ErrNoAccess.
package preempt
