// Package gossip finds dead members of a job in about a second, by running
// hashicorp/memberlist (SWIM failure detection) among the job's sidecars.
//
// etcd stays the single source of truth for membership: a member's lease
// expiring is what finally removes it. Gossip only makes that faster. When a
// member stops answering probes (a kill -9, a frozen process, a lost node or a
// partition) the survivors declare it dead and each calls
// [Events.MemberDead]; the sidecar then asks the leader to revoke the dead
// member's lease and resets the pod's TCP connections to it.
//
// A member that leaves on purpose calls [Gossip.Leave] first. It announces its
// departure, so the others report it through [LeaveEvents.MemberLeft] and not
// as a death.
//
// The timing is set by [DefaultConfig]; its doc comment gives the formula
// behind the values and the detection times they give.
package gossip
